#pragma once
// check_syntax.sh only: declarations standing in for cuda_bf16.h, enough for g++ to
// parse and type-check the probes on a machine without CUDA. Never compiled into anything.
#include "cuda_runtime.h"
struct __nv_bfloat16 { unsigned short v; }; typedef __nv_bfloat16 nv_bfloat16;
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
float __bfloat162float(__nv_bfloat16); __nv_bfloat16 __float2bfloat16(float); float2 __bfloat1622float2(__nv_bfloat162);
__nv_bfloat16 __ushort_as_bfloat16(unsigned short);
