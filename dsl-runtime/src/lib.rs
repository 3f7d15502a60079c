// dsl-runtime
