//! `tessera serve` under load, bounded in count and time: 16 concurrent streaming
//! clients all complete, each with its own sequential result; a full queue answers 503.
mod serve_common;
use serde_json::json;
use serve_common::*;
use std::time::Duration;

const CPU: [&str; 4] = ["--engine", "reference", "--device", "cpu"];
const CLIENTS: usize = 16;

/// Each client samples with its own seed and prompt: any mixing of tokens, sampler
/// state or KV cache between requests would change some text.
fn body(i: usize, stream: bool) -> serde_json::Value {
    json!({
        "messages": [{"role": "user", "content": format!("client {i}: say something")}],
        "max_tokens": 16 + i,
        "temperature": 0.8,
        "seed": 1000 + i,
        "stream": stream,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_streams_equal_their_sequential_results() {
    let server = Server::start(&[&CPU[..], &["--queue-size", "16"]].concat());
    let url = server.url("/v1/chat/completions");
    let mut sequential = vec![];
    for i in 0..CLIENTS {
        let (st, r) = post(&url, &body(i, false)).await;
        assert_eq!(st, 200, "{r}");
        sequential.push((
            r["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string(),
            r["choices"][0]["finish_reason"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    let distinct: std::collections::HashSet<_> = sequential.iter().map(|s| &s.0).collect();
    assert!(
        distinct.len() > CLIENTS / 2,
        "prompts and seeds give different texts"
    );

    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move { stream(&url, &body(i, true)).await })
        })
        .collect();
    let all = async {
        let mut out = vec![];
        for t in tasks {
            out.push(t.await.expect("client task"));
        }
        out
    };
    let results = tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("all 16 streams finish within 120 s");
    let mut ids = std::collections::HashSet::new();
    for (i, s) in results.iter().enumerate() {
        assert!(s.done, "client {i}: no [DONE]");
        assert_eq!(s.text(), sequential[i].0, "client {i}: text");
        assert_eq!(s.finish_reason().unwrap(), sequential[i].1, "client {i}");
        let id = &s.chunks[0]["id"];
        assert!(
            s.chunks.iter().all(|c| &c["id"] == id),
            "client {i}: one id per stream"
        );
        assert!(ids.insert(id.to_string()), "client {i}: id {id} reused");
    }
    let err = server.stderr();
    assert_eq!(
        err.lines().filter(|l| l.contains("finish ")).count(),
        2 * CLIENTS,
        "one log line per request:\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_503_with_retry_after() {
    // One place in the queue; tokens slowed so the running request holds the engine.
    let log = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-503-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let server = Server::start(
        &[
            &CPU[..],
            &[
                "--queue-size",
                "1",
                "--step-delay-ms",
                "50",
                "--log",
                log.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    let url = server.url("/v1/completions");
    // A: running (its first chunk has arrived).
    let a = client()
        .post(&url)
        .json(&json!({"prompt": "A", "max_tokens": 200, "stream": true}))
        .send()
        .await
        .unwrap();
    let mut a_body = a.bytes_stream();
    use futures_util::StreamExt;
    a_body.next().await.unwrap().unwrap();
    // B: waiting in the queue's one place.
    let b = tokio::spawn({
        let url = url.clone();
        async move { post(&url, &json!({"prompt": "B", "max_tokens": 2})).await }
    });
    let t = std::time::Instant::now();
    loop {
        let (_, h) = get(&server.url("/health")).await;
        assert_eq!(h["queue"]["capacity"], 1);
        if h["queue"]["waiting"] == 1 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "B never queued: {h}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // C: no room.
    let r = client()
        .post(&url)
        .json(&json!({"prompt": "C", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "queue_full");
    assert_eq!(v["error"]["type"], "server_error");
    // A leaves; B then runs and completes.
    drop(a_body);
    let (st, v) = tokio::time::timeout(Duration::from_secs(30), b)
        .await
        .expect("B finishes")
        .unwrap();
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    // The per-request lines went to --log, not stderr. The server writes B's line after
    // B's last byte, so the client can get there first: wait for it (a few seconds at most).
    let mut lines = String::new();
    for _ in 0..100 {
        lines = std::fs::read_to_string(&log).unwrap();
        if lines.contains("cmpl-1: prompt 1 tokens") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        lines.contains("cmpl-0: prompt 1 tokens") && lines.contains("cancelled"),
        "{lines}"
    );
    assert!(
        lines.contains("cmpl-1: prompt 1 tokens") && lines.contains("finish length"),
        "{lines}"
    );
    assert!(!server.stderr().contains("cmpl-"), "{}", server.stderr());
}
