//! `tessera serve` over real HTTP on a loopback port: chat and text completions,
//! streaming and not, greedy output equal to `tessera generate`, OpenAI error objects
//! for bad input, a client leaving mid-stream, and Ctrl-C.
mod serve_common;
use serde_json::{json, Value};
use serve_common::*;

const CPU: [&str; 4] = ["--engine", "reference", "--device", "cpu"];

fn expected(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(name).join("expected.json")).unwrap())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_and_completion_equal_generate() {
    let model = data("mha_tok_v5");
    let m = model.to_str().unwrap();
    let server = Server::start(&[&["--model", m][..], &CPU].concat());
    let exp = expected("mha_tok_v5");
    let user = exp["chat"]["user"].as_str().unwrap();

    // The model's name is the checkpoint directory's.
    let (st, models) = get(&server.url("/v1/models")).await;
    assert_eq!(st, 200);
    assert_eq!(models["data"][0]["id"], "mha_tok_v5");
    assert_eq!(models["data"][0]["random_weights"], false);

    let g = generate(
        &[
            &[
                "--model",
                m,
                "--prompt",
                user,
                "--no-thinking",
                "--max-new-tokens",
                "24",
            ][..],
            &CPU,
        ]
        .concat(),
    );
    let text = g["text"].as_str().unwrap();
    assert_eq!(text, exp["chat"]["greedy_text"], "generate itself");
    let n_gen = g["generated_ids"].as_array().unwrap().len();
    let finish = if g["stop_reason"] == "eos" {
        "stop"
    } else {
        "length"
    };

    let body = json!({
        "model": "mha_tok_v5",
        "messages": [{"role": "user", "content": user}],
        "max_tokens": 24, "temperature": 0, "enable_thinking": false,
    });
    let (st, r) = post(&server.url("/v1/chat/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(r["model"], "mha_tok_v5");
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r["choices"][0]["message"]["role"], "assistant");
    assert_eq!(r["choices"][0]["message"]["content"], text);
    assert_eq!(r["choices"][0]["finish_reason"], finish);
    let prompt_len = exp["chat"]["ids_no_thinking"].as_array().unwrap().len();
    assert_eq!(
        r["usage"]["prompt_tokens"], prompt_len,
        "the chat template applied"
    );
    assert_eq!(r["usage"]["completion_tokens"], n_gen);
    assert_eq!(r["usage"]["total_tokens"], prompt_len + n_gen);

    // The same, streamed: a role chunk, one chunk per token with text, the finish, [DONE].
    let mut sb = body.clone();
    sb["stream"] = true.into();
    sb["stream_options"] = json!({"include_usage": true});
    let s = stream(&server.url("/v1/chat/completions"), &sb).await;
    assert!(s.done, "ends with [DONE]");
    assert_eq!(s.text(), text);
    assert_eq!(s.finish_reason().as_deref(), Some(finish));
    assert_eq!(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(s
        .chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == s.chunks[0]["id"]));
    let text_chunks = s
        .chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    // At most one chunk per token (a token may complete no character of this random model).
    assert!(
        text_chunks >= 2 && text_chunks <= n_gen,
        "{text_chunks} chunks for {n_gen} tokens"
    );
    let last = s.chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], n_gen);

    // Thinking on (the default) renders the other prompt.
    let mut tb = body.clone();
    tb.as_object_mut().unwrap().remove("enable_thinking");
    tb["max_tokens"] = 1.into();
    let (_, r) = post(&server.url("/v1/chat/completions"), &tb).await;
    assert_eq!(
        r["usage"]["prompt_tokens"],
        exp["chat"]["ids_thinking"].as_array().unwrap().len()
    );
    tb["chat_template_kwargs"] = json!({"enable_thinking": false});
    let (_, r) = post(&server.url("/v1/chat/completions"), &tb).await;
    assert_eq!(
        r["usage"]["prompt_tokens"], prompt_len,
        "vLLM's chat_template_kwargs"
    );

    // Text completion: the raw prompt, no template.
    let g = generate(
        &[
            &[
                "--model",
                m,
                "--prompt",
                "Hello world",
                "--raw",
                "--max-new-tokens",
                "12",
            ][..],
            &CPU,
        ]
        .concat(),
    );
    let body = json!({"prompt": "Hello world", "max_tokens": 12, "temperature": 0});
    let (st, r) = post(&server.url("/v1/completions"), &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    assert_eq!(r["choices"][0]["text"], g["text"]);
    assert_eq!(
        r["usage"]["prompt_tokens"],
        g["prompt_ids"].as_array().unwrap().len()
    );
    let mut sb = body.clone();
    sb["stream"] = true.into();
    let s = stream(&server.url("/v1/completions"), &sb).await;
    assert!(s.done);
    assert_eq!(s.text(), g["text"].as_str().unwrap());
    assert!(s.chunks.iter().all(|c| c["object"] == "text_completion"));
    // Token ids as the prompt.
    let ids = g["prompt_ids"].clone();
    let (st, r) = post(
        &server.url("/v1/completions"),
        &json!({"prompt": ids, "max_tokens": 12, "temperature": 0}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(r["choices"][0]["text"], g["text"]);

    // One line per request on stderr.
    let err = server.stderr();
    assert!(
        err.contains(&format!("prompt {prompt_len} tokens")),
        "{err}"
    );
    assert!(
        err.contains("time to first token") && err.contains("tokens/s"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_model_sampling_and_stop_strings() {
    let server = Server::start(&CPU);
    let err = server.stderr();
    assert!(err.contains("RANDOM"), "says so on stderr: {err}");
    let (_, models) = get(&server.url("/v1/models")).await;
    let m = &models["data"][0];
    assert_eq!(m["id"], "tessera-embedded-random");
    assert_eq!(m["random_weights"], true);
    assert!(m["description"].as_str().unwrap().contains("RANDOM"));
    assert_eq!(m["max_model_len"], 512);
    let (st, h) = get(&server.url("/health")).await;
    assert_eq!((st, &h["status"]), (200, &json!("ok")));

    // Greedy equals generate (raw bytes: the embedded model has no template).
    let g = generate(&[&["--prompt", "Hello", "--max-new-tokens", "40"][..], &CPU].concat());
    let url = server.url("/v1/completions");
    let (_, r) = post(
        &url,
        &json!({"prompt": "Hello", "max_tokens": 40, "temperature": 0}),
    )
    .await;
    let text = r["choices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(text, g["text"].as_str().unwrap());
    // Chat without a template: the message as plain text, like generate --prompt.
    let (_, c) = post(&server.url("/v1/chat/completions"), &json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 40, "temperature": 0})).await;
    assert_eq!(c["choices"][0]["message"]["content"], text);

    // Streamed: one chunk per token (each token of this text is one printable byte).
    let s = stream(
        &url,
        &json!({"prompt": "Hello", "max_tokens": 40, "temperature": 0, "stream": true}),
    )
    .await;
    assert_eq!(s.text(), text);
    assert!(text.bytes().all(|b| (32..127).contains(&b)), "{text:?}");
    let pieces: Vec<&str> = s
        .chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(pieces.len(), 40, "{pieces:?}");

    // A stop string from the middle of that text: cut before it, finish "stop".
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() > 12, "{text:?}");
    let stop: String = chars[8..10].iter().collect();
    let want = &text[..text.find(&stop).unwrap()];
    let body = json!({"prompt": "Hello", "max_tokens": 40, "temperature": 0, "stop": [stop, "\u{1}never"]});
    let (_, r) = post(&url, &body).await;
    assert_eq!(r["choices"][0]["text"], want);
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    assert!(r["usage"]["completion_tokens"].as_u64().unwrap() < 40);
    let mut sb = body.clone();
    sb["stream"] = true.into();
    let s = stream(&url, &sb).await;
    assert_eq!(s.text(), want);
    assert_eq!(s.finish_reason().as_deref(), Some("stop"));
    // max_tokens ends it with "length".
    let (_, r) = post(
        &url,
        &json!({"prompt": "Hello", "max_tokens": 3, "temperature": 0}),
    )
    .await;
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["completion_tokens"], 3);

    // Sampling follows the seed, and top_k / top_p are honoured (generate agrees).
    let sample = |seed: u64| json!({"prompt": "Hi", "max_tokens": 12, "temperature": 1.5, "top_k": 40, "top_p": 0.9, "seed": seed});
    let (_, a) = post(&url, &sample(1)).await;
    let (_, b) = post(&url, &sample(1)).await;
    let (_, c) = post(&url, &sample(2)).await;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    assert_ne!(a["choices"][0]["text"], c["choices"][0]["text"]);
    let g = generate(
        &[
            &[
                "--prompt",
                "Hi",
                "--max-new-tokens",
                "12",
                "--temperature",
                "1.5",
                "--top-k",
                "40",
                "--top-p",
                "0.9",
                "--seed",
                "1",
            ][..],
            &CPU,
        ]
        .concat(),
    );
    assert_eq!(a["choices"][0]["text"], g["text"]);
}

fn assert_error(st: u16, v: &Value, status: u16, param: Option<&str>, words: &[&str]) {
    assert_eq!(st, status, "{v}");
    let e = &v["error"];
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "error object without {k}: {v}");
    }
    assert_eq!(e["param"].as_str(), param, "{v}");
    let msg = e["message"].as_str().unwrap();
    for w in words {
        assert!(msg.contains(w), "{msg:?} should mention {w:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_openai_errors() {
    let server = Server::start(&CPU);
    let chat = server.url("/v1/chat/completions");
    let cmpl = server.url("/v1/completions");
    let raw = |url: String, body: &'static str| async move {
        let r = client()
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    let (st, v) = raw(chat.clone(), "{\"messages\": [").await;
    assert_error(st, &v, 400, None, &["parse the JSON"]);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let (st, v) = raw(cmpl.clone(), "[1, 2]").await;
    assert_error(st, &v, 400, None, &["JSON object"]);
    let msg = json!([{"role": "user", "content": "hi"}]);

    let (st, v) = post(&chat, &json!({"model": "tessera-embedded-random"})).await;
    assert_error(
        st,
        &v,
        400,
        Some("messages"),
        &["Missing required parameter", "messages"],
    );
    let (st, v) = post(&cmpl, &json!({"max_tokens": 3})).await;
    assert_error(st, &v, 400, Some("prompt"), &["Missing"]);
    let (st, v) = post(&chat, &json!({"messages": "hi"})).await;
    assert_error(st, &v, 400, Some("messages"), &["invalid type"]);
    let (st, v) = post(&chat, &json!({"messages": msg, "max_tokens": "ten"})).await;
    assert_error(st, &v, 400, Some("max_tokens"), &["invalid type"]);
    let (st, v) = post(&chat, &json!({"messages": msg, "temperature": "hot"})).await;
    assert_error(st, &v, 400, Some("temperature"), &[]);
    let (st, v) = post(&chat, &json!({"messages": msg, "stream": "yes"})).await;
    assert_error(st, &v, 400, Some("stream"), &[]);
    let (st, v) = post(&chat, &json!({"messages": [{"content": "hi"}]})).await;
    assert_error(st, &v, 400, Some("messages[0].role"), &[]);
    let (st, v) = post(
        &chat,
        &json!({"messages": [{"role": "user", "content": 5}]}),
    )
    .await;
    assert_error(st, &v, 400, Some("messages[0].content"), &[]);
    let (st, v) = post(&chat, &json!({"messages": []})).await;
    assert_error(st, &v, 400, Some("messages"), &["at least one"]);
    let (st, v) = post(&cmpl, &json!({"prompt": "hi", "stop": 3})).await;
    assert_error(st, &v, 400, Some("stop"), &[]);
    let (st, v) = post(&cmpl, &json!({"prompt": "hi", "n": 2})).await;
    assert_error(st, &v, 400, Some("n"), &["n = 1"]);
    let (st, v) = post(&cmpl, &json!({"prompt": "hi", "top_p": 0})).await;
    assert_error(st, &v, 400, Some("top_p"), &[]);
    let (st, v) = post(&cmpl, &json!({"prompt": [1, 100000]})).await;
    assert_error(st, &v, 400, Some("prompt"), &["100000", "vocab_size"]);

    // The embedded model's context is 512 positions.
    let long = "x".repeat(600);
    let (st, v) = post(&cmpl, &json!({"prompt": long})).await;
    assert_error(
        st,
        &v,
        400,
        Some("prompt"),
        &["maximum context length is 512", "600"],
    );
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let (st, v) = post(
        &chat,
        &json!({"messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_error(st, &v, 400, Some("messages"), &["512"]);
    let (st, v) = post(&cmpl, &json!({"prompt": "hi", "max_tokens": 600})).await;
    assert_error(
        st,
        &v,
        400,
        Some("max_tokens"),
        &["512", "602", "600 in the completion"],
    );
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let (st, v) = post(&cmpl, &json!({"prompt": "hi", "max_tokens": 510})).await;
    assert_eq!(st, 200, "prompt + max_tokens = the context: {v}");

    let (st, v) = post(&chat, &json!({"model": "gpt-4o", "messages": msg})).await;
    assert_error(
        st,
        &v,
        404,
        Some("model"),
        &["gpt-4o", "tessera-embedded-random"],
    );
    assert_eq!(v["error"]["code"], "model_not_found");
    let (st, v) = post(&server.url("/v1/embeddings"), &json!({})).await;
    assert_error(st, &v, 404, None, &["/v1/embeddings"]);

    let r = client().get(&chat).send().await.unwrap();
    let st = r.status().as_u16();
    assert_error(st, &r.json().await.unwrap(), 405, None, &["GET"]);

    // Still serving, and nothing panicked.
    let (st, _) = post(&cmpl, &json!({"prompt": "hi", "max_tokens": 2})).await;
    assert_eq!(st, 200);
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

#[test]
fn checkpoint_without_tokenizer_is_refused() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--port", "0", "--model"])
        .arg(data("tied_gqa2_v4"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("error: ") && err.contains("tokenizer.json"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A client that leaves mid-stream stops its generation at the next token; the engine
/// goes on to the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_stops_its_generation() {
    let server = Server::start(&[&CPU[..], &["--step-delay-ms", "20"]].concat());
    let url = server.url("/v1/completions");
    let body = json!({"prompt": "Hello", "max_tokens": 400, "temperature": 0, "stream": true});
    let r = client().post(&url).json(&body).send().await.unwrap();
    let mut bytes = r.bytes_stream();
    use futures_util::StreamExt;
    let mut got = 0;
    while got < 3 {
        bytes.next().await.unwrap().unwrap();
        got += 1;
    }
    drop(bytes);
    // 400 tokens would take 8 s; the log line comes well before.
    let err = server.wait_for_stderr("cancelled: client disconnected", 10);
    let line = err.lines().find(|l| l.contains("cancelled")).unwrap();
    let n: usize = line
        .split("decode ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n < 40, "stopped after {n} tokens: {line}");
    let (st, r) = post(&url, &json!({"prompt": "Hi", "max_tokens": 3})).await;
    assert_eq!(
        (st, r["usage"]["completion_tokens"].as_u64()),
        (200, Some(3))
    );
    // Not streaming: a client that gives up waiting stops it too.
    let gave_up = client()
        .post(&url)
        .timeout(std::time::Duration::from_millis(300))
        .json(&json!({"prompt": "Hey", "max_tokens": 400}))
        .send()
        .await;
    assert!(gave_up.is_err(), "timed out");
    let t = std::time::Instant::now();
    loop {
        let err = server.stderr();
        if let Some(line) = err.lines().find(|l| l.contains("prompt 3 tokens")) {
            assert!(line.contains("cancelled"), "{line}");
            break;
        }
        assert!(
            t.elapsed().as_secs() < 10,
            "no log line for the abandoned request:\n{err}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Ctrl-C: the stream in flight finishes, then the server exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_drains_and_exits() {
    let mut server = Server::start(&[&CPU[..], &["--step-delay-ms", "10"]].concat());
    let url = server.url("/v1/completions");
    let body = json!({"prompt": "Hello", "max_tokens": 60, "temperature": 0, "stream": true});
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let r = client().post(&url).json(&body).send().await.unwrap();
    let mut events = r.bytes_stream().eventsource();
    let first = events.next().await.unwrap().unwrap();
    assert_ne!(first.data, "[DONE]");
    // The request is running: interrupt, then read the rest.
    server.interrupt();
    let mut rest = vec![];
    let read = async {
        while let Some(ev) = events.next().await {
            rest.push(ev.unwrap().data);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .expect("the stream finished");
    assert_eq!(
        rest.last().map(String::as_str),
        Some("[DONE]"),
        "the stream in flight finished"
    );
    let fin: Value = serde_json::from_str(&rest[rest.len() - 2]).unwrap();
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert!(server.wait_exit(30), "clean exit: {}", server.stderr());
    let err = server.stderr();
    assert!(
        err.contains("shutting down") && err.contains("stopped"),
        "{err}"
    );
    assert!(err.contains("finish length"), "{err}");
    assert!(
        client().get(server.url("/health")).send().await.is_err(),
        "no longer listening"
    );
}

/// The megakernel engine (the one-launch decode step, here through the interpreter) behind
/// the server: greedy equals the reference engine's, also after a sampled request has
/// used the same engine and KV cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megakernel_engine_serves_the_same_tokens() {
    let model = data("mha_tok_v5");
    let m = model.to_str().unwrap();
    let server = Server::start(&[
        "--model",
        m,
        "--engine",
        "megakernel",
        "--device",
        "cpu",
        "--max-context",
        "64",
    ]);
    let (_, models) = get(&server.url("/v1/models")).await;
    assert_eq!(models["data"][0]["engine"], "megakernel");
    assert_eq!(models["data"][0]["max_model_len"], 64);
    let g = generate(
        &[
            &[
                "--model",
                m,
                "--prompt",
                "Hello world",
                "--raw",
                "--max-new-tokens",
                "5",
            ][..],
            &CPU,
        ]
        .concat(),
    );
    let url = server.url("/v1/completions");
    let greedy =
        json!({"prompt": "Hello world", "max_tokens": 5, "temperature": 0, "stream": true});
    let s = stream(&url, &greedy).await;
    assert_eq!(s.text(), g["text"].as_str().unwrap());
    let sampled = json!({"prompt": "Hi there, some other prompt", "max_tokens": 4, "temperature": 0.9, "seed": 3});
    let (st, _) = post(&url, &sampled).await;
    assert_eq!(st, 200);
    let s = stream(&url, &greedy).await;
    assert_eq!(
        s.text(),
        g["text"].as_str().unwrap(),
        "after another request"
    );
    let (st, v) = post(&url, &json!({"prompt": "Hello world", "max_tokens": 60})).await;
    assert_error(
        st,
        &v,
        400,
        Some("max_tokens"),
        &["maximum context length is 64"],
    );
}
