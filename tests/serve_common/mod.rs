//! A `tessera serve` process on an ephemeral loopback port, and a small client for it
//! (reqwest, with eventsource-stream for the server-sent events).
#![allow(dead_code)]
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("model/tests/data")
        .join(name)
}

pub struct Server {
    child: Child,
    pub base: String,
    stderr: Arc<Mutex<String>>,
    /// Copies the server's stderr into `stderr` until the pipe closes.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `tessera serve --host 127.0.0.1 --port 0 ARGS` and waits for its address.
    pub fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run tessera serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let log = stderr.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_string());
                }
                let mut l = log.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(b) => b,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the server did not start; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        assert!(base.starts_with("http://127.0.0.1:"), "{base}");
        Server {
            child,
            base,
            stderr,
            reader: Some(reader),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stderr contains `needle` (or panics after `secs`).
    pub fn wait_for_stderr(&self, needle: &str, secs: u64) -> String {
        let t = Instant::now();
        loop {
            let s = self.stderr();
            if s.contains(needle) {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "no {needle:?} on stderr after {secs} s:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ctrl-C.
    pub fn interrupt(&self) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -INT failed");
    }

    /// Waits for the process to exit (panics after `secs`), then for the last of its stderr
    /// (the pipe closes with it); true on success.
    pub fn wait_exit(&mut self, secs: u64) -> bool {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return st.success();
            }
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "the server did not exit within {secs} s:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// POSTs `body` as JSON; returns the status and the JSON answer.
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().await.expect("POST");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("answer is not JSON ({e}): {text:?}"));
    (status, v)
}

pub async fn get(url: &str) -> (u16, Value) {
    let r = client().get(url).send().await.expect("GET");
    let status = r.status().as_u16();
    (status, r.json().await.expect("JSON"))
}

/// A streamed answer: every `data:` payload, parsed, up to and without `[DONE]`.
pub struct Streamed {
    pub chunks: Vec<Value>,
    pub done: bool,
}

impl Streamed {
    /// The text the chunks carry (chat deltas or completion text).
    pub fn text(&self) -> String {
        self.chunks
            .iter()
            .filter_map(|c| {
                let ch = c["choices"].get(0)?;
                ch["delta"]["content"]
                    .as_str()
                    .or(ch["text"].as_str())
                    .map(str::to_string)
            })
            .collect()
    }
    pub fn finish_reason(&self) -> Option<String> {
        self.chunks.iter().rev().find_map(|c| {
            c["choices"].get(0)?["finish_reason"]
                .as_str()
                .map(str::to_string)
        })
    }
}

/// POSTs `body` (with "stream": true) and reads the whole event stream.
pub async fn stream(url: &str, body: &Value) -> Streamed {
    let r = client().post(url).json(body).send().await.expect("POST");
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut events = r.bytes_stream().eventsource();
    let mut out = Streamed {
        chunks: vec![],
        done: false,
    };
    while let Some(ev) = events.next().await {
        let ev = ev.expect("event");
        assert!(!out.done, "an event after [DONE]: {}", ev.data);
        if ev.data == "[DONE]" {
            out.done = true;
        } else {
            out.chunks
                .push(serde_json::from_str(&ev.data).expect("chunk JSON"));
        }
    }
    out
}

/// `tessera generate ARGS --json`.
pub fn generate(args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("generate")
        .args(args)
        .arg("--json")
        .output()
        .expect("run tessera generate");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}
