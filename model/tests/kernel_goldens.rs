//! Per-op goldens (seed 000's harness): every op of every layer, run by the interpreter on
//! the committed checkpoints' real weights, fed the reference decoder's own intermediates
//! (`Reference::forward_traced`, rounded to bf16 as the kernels store them) and compared
//! with the reference's next intermediate. A bug in one op shows up here, named, before it
//! washes through the layers into a wrong token.
mod common;
use common::*;
use dsl_runtime::{bf16, Buffer, Device, Element, Launch};
use model::kernels::{attention, gemv, lm_head, mlp, rope, Tiles, NUM_WARPS};
use model::reference::{matvec, rope_inv_freq, rope_table, silu, LayerTrace};
use model::{Checkpoint, Reference};
use std::sync::Arc;

const TOL: f32 = 1e-2;

fn dev() -> Device {
    Device::interpreter()
}
fn grid(n: usize) -> Launch {
    Launch::grid(n as u32).warps(NUM_WARPS)
}
fn up<T: Element>(v: &[T]) -> Buffer<T> {
    dev().upload(v).unwrap()
}
fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}
fn f32s(b: &Buffer<bf16>) -> Vec<f32> {
    b.to_vec().unwrap().iter().map(|x| x.to_f32()).collect()
}

fn check(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let max_ref = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let e = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / max_ref;
    eprintln!("{what}: rel err {e:.2e}");
    assert!(e < TOL, "{what}: relative error {e} ≥ {TOL}");
}

#[test]
fn every_op_of_every_layer_matches_the_traced_reference() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let (cfg, w) = (ck.config.clone(), Arc::new(ck.weights));
        let t = Tiles::for_config(&cfg);
        let mut r = Reference::new(cfg.clone(), Arc::clone(&w));
        let prompt = ids(&expected(name)["prompt_ids"]);
        let n_layers = cfg.num_hidden_layers;
        // Traces of every layer at every prompt position (the K/V history attention needs).
        let mut traces: Vec<Vec<LayerTrace>> = vec![];
        let mut logits = vec![];
        for (p, &tok) in prompt.iter().enumerate() {
            let (l, tr) = r.forward_traced(tok, p, n_layers).unwrap();
            traces.push(tr);
            logits = l;
        }
        let pos = prompt.len() - 1;
        let last = &traces[pos];
        let (h, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (nh, nkv, max_seq) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            prompt.len() + 3,
        );
        let eps = cfg.rms_norm_eps as f32;
        let pos_buf = up(&[pos as i32]);

        for (l, (lw, tr)) in w.layers.iter().zip(last).enumerate() {
            let at = |op: &str| format!("{name} layer {l} {op}");
            let x_in: Vec<f32> = if l == 0 {
                w.embed_tokens
                    .row(prompt[pos] as usize)
                    .iter()
                    .map(|v| v.to_f32())
                    .collect()
            } else {
                last[l - 1].residual_after_mlp.clone()
            };

            // Input norm + QKV.
            let rows = cfg.q_dim() + 2 * cfg.kv_dim();
            let qkv = dev().zeros::<bf16>(rows).unwrap();
            gemv::rmsnorm_gemv::launch(
                &dev(),
                &grid(t.qkv.programs(rows)),
                &up(&x_in),
                &up(&lw.input_layernorm.data),
                &up(&lw.fused_qkv()),
                &qkv,
                rows as i32,
                h as i32,
                eps,
                t.qkv.bm,
                t.qkv.bk,
            )
            .unwrap();
            let raw: Vec<f32> = [
                matvec(&lw.q_proj, &tr.attn_norm),
                matvec(&lw.k_proj, &tr.attn_norm),
                tr.v.clone(),
            ]
            .concat();
            check(&at("rmsnorm_gemv (qkv)"), &f32s(&qkv), &raw);

            // q/k norm + rope + cache write, from the reference's raw q/k/v.
            let (q, kc, vc) = (
                dev().zeros::<bf16>(nh * hd).unwrap(),
                dev().zeros::<bf16>(nkv * max_seq * hd).unwrap(),
                dev().zeros::<bf16>(nkv * max_seq * hd).unwrap(),
            );
            rope::qk_norm_rope::launch(
                &dev(),
                &grid(nh + nkv),
                &up(&bf(&raw)),
                &up(&lw.q_norm.data),
                &up(&lw.k_norm.data),
                &up(&rope_table(&rope_inv_freq(&cfg), max_seq)),
                &pos_buf,
                &q,
                &kc,
                &vc,
                nh as i32,
                nkv as i32,
                max_seq as i32,
                eps,
                hd,
            )
            .unwrap();
            check(&at("qk_norm_rope q"), &f32s(&q), &tr.q);
            let slot = |c: &[f32], j: usize| c[(j * max_seq + pos) * hd..][..hd].to_vec();
            let (kcv, vcv) = (f32s(&kc), f32s(&vc));
            check(
                &at("qk_norm_rope k"),
                &(0..nkv).flat_map(|j| slot(&kcv, j)).collect::<Vec<_>>(),
                &tr.k,
            );
            check(
                &at("qk_norm_rope v"),
                &(0..nkv).flat_map(|j| slot(&vcv, j)).collect::<Vec<_>>(),
                &tr.v,
            );

            // Attention over the traced K/V history, [kv_head][pos][head_dim].
            let mut kh = vec![bf16::ZERO; nkv * max_seq * hd];
            let mut vh = kh.clone();
            for (p, tp) in traces.iter().enumerate() {
                for j in 0..nkv {
                    let dst = (j * max_seq + p) * hd;
                    kh[dst..dst + hd].copy_from_slice(&bf(&tp[l].k[j * hd..(j + 1) * hd]));
                    vh[dst..dst + hd].copy_from_slice(&bf(&tp[l].v[j * hd..(j + 1) * hd]));
                }
            }
            let parts = nh * t.attn_splits;
            let (pm, pl, pa) = (
                dev().zeros::<f32>(parts).unwrap(),
                dev().zeros::<f32>(parts).unwrap(),
                dev().zeros::<f32>(parts * hd).unwrap(),
            );
            let attn = dev().zeros::<bf16>(nh * hd).unwrap();
            let split = Launch::grid((nh as u32, t.attn_splits as u32)).warps(NUM_WARPS);
            let scale = 1.0 / (hd as f32).sqrt();
            attention::attn_split::launch(
                &dev(),
                &split,
                &up(&bf(&tr.q)),
                &up(&kh),
                &up(&vh),
                &pos_buf,
                &pm,
                &pl,
                &pa,
                cfg.gqa_group() as i32,
                max_seq as i32,
                scale,
                hd,
                t.attn_block_n,
                t.attn_splits,
            )
            .unwrap();
            attention::attn_merge::launch(
                &dev(),
                &grid(nh),
                &pm,
                &pl,
                &pa,
                &attn,
                hd,
                t.attn_splits,
            )
            .unwrap();
            check(&at("attention"), &f32s(&attn), &tr.attn);

            // o_proj + residual.
            let res = up(&x_in);
            gemv::gemv_residual::launch(
                &dev(),
                &grid(t.o_proj.programs(h)),
                &up(&lw.o_proj.data),
                &up(&bf(&tr.attn)),
                &res,
                h as i32,
                cfg.q_dim() as i32,
                t.o_proj.bm,
                t.o_proj.bk,
            )
            .unwrap();
            check(
                &at("o_proj + residual"),
                &res.to_vec().unwrap(),
                &tr.residual_after_attn,
            );

            // Post-attention norm + gate/up + SiLU·mul.
            let act = dev().zeros::<bf16>(inter).unwrap();
            mlp::rmsnorm_gate_up_silu::launch(
                &dev(),
                &grid(t.gate_up.programs(inter)),
                &up(&tr.residual_after_attn),
                &up(&lw.post_attention_layernorm.data),
                &up(&lw.fused_gate_up()),
                &act,
                inter as i32,
                h as i32,
                eps,
                t.gate_up.bm,
                t.gate_up.bk,
            )
            .unwrap();
            let want_act: Vec<f32> = matvec(&lw.gate_proj, &tr.mlp_norm)
                .iter()
                .zip(matvec(&lw.up_proj, &tr.mlp_norm))
                .map(|(g, u)| silu(*g) * u)
                .collect();
            check(&at("gate/up silu"), &f32s(&act), &want_act);

            // down + residual.
            let res = up(&tr.residual_after_attn);
            gemv::gemv_residual::launch(
                &dev(),
                &grid(t.down.programs(h)),
                &up(&lw.down_proj.data),
                &up(&bf(&want_act)),
                &res,
                h as i32,
                inter as i32,
                t.down.bm,
                t.down.bk,
            )
            .unwrap();
            check(
                &at("down + residual"),
                &res.to_vec().unwrap(),
                &tr.residual_after_mlp,
            );
        }

        // Final norm + lm_head + two-phase argmax.
        let x = up(&last[n_layers - 1].residual_after_mlp);
        let (vocab, g) = (cfg.vocab_size, t.lm_head);
        let blocks = g.programs(vocab);
        let out = dev().zeros::<f32>(vocab).unwrap();
        let (pmax, pidx, tok) = (
            dev().zeros::<f32>(blocks).unwrap(),
            dev().zeros::<i32>(blocks).unwrap(),
            dev().zeros::<i32>(1).unwrap(),
        );
        lm_head::lm_head_argmax::launch(
            &dev(),
            &grid(blocks),
            &x,
            &up(&w.norm.data),
            &up(&w.lm_head().data),
            &out,
            &pmax,
            &pidx,
            &dev().zeros::<i32>(1).unwrap(), // pos (unused when greedy)
            &dev().zeros::<i32>(1).unwrap(), // seed
            &dev().zeros::<f32>(1).unwrap(), // 1 / temperature: 0 = greedy
            vocab as i32,
            h as i32,
            eps,
            g.bm,
            g.bk,
            1,
        )
        .unwrap();
        lm_head::argmax_merge::launch(
            &dev(),
            &grid(1),
            &pmax,
            &pidx,
            &tok,
            &dev().zeros::<i32>(1).unwrap(),
            &dev().zeros::<i32>(1).unwrap(),
            blocks as i32,
            t.argmax_block,
        )
        .unwrap();
        check(&format!("{name} lm_head"), &out.to_vec().unwrap(), &logits);
        assert_eq!(
            tok.to_vec().unwrap()[0] as u32,
            model::sampling::argmax(&logits),
            "{name}: fused argmax"
        );
    }
}
