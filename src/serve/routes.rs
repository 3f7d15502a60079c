//! The HTTP side: axum handlers that check a request, queue it, and turn the engine's
//! events into one JSON response or a server-sent-event stream ending with `[DONE]`.
use super::error::ApiError;
use super::queue::{EngineInfo, Event, Job, Queue, SubmitError};
use super::request::{self, Checked, Served};
use super::response::{Endpoint, Head, Usage};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_stream::wrappers::UnboundedReceiverStream;

pub struct AppState {
    pub served: Served,
    pub info: EngineInfo,
    pub queue: Queue,
    pub next_id: AtomicU64,
    pub started: u64,
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .fallback(|method: Method, uri: Uri| async move {
            ApiError::no_route(method.as_str(), uri.path())
        })
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            ApiError::method_not_allowed(method.as_str(), uri.path())
        })
        .with_state(state)
}

async fn chat(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let checked = request::parse_body(&body).and_then(|v| request::chat(&v, &s.served));
    answer(&s, Endpoint::Chat, checked).await
}

async fn completions(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    let checked = request::parse_body(&body).and_then(|v| request::completion(&v, &s.served));
    answer(&s, Endpoint::Completion, checked).await
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    let mut m = json!({
        "id": s.served.id,
        "object": "model",
        "created": s.started,
        "owned_by": "tessera",
        "max_model_len": s.info.max_context,
        "engine": s.info.name,
        "device": s.info.device,
        "random_weights": s.served.embedded,
    });
    if s.served.embedded {
        m["description"] =
            "the embedded Qwen3 with RANDOM weights (no --model given): its output is noise".into();
    }
    Json(json!({"object": "list", "data": [m]}))
}

async fn health(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "model": s.served.id,
        "engine": s.info.name,
        "device": s.info.device,
        "queue": {"waiting": s.queue.waiting(), "capacity": s.queue.capacity()},
    }))
}

/// Queues a checked request and answers it, whole or streamed.
async fn answer(s: &AppState, endpoint: Endpoint, checked: Result<Checked, ApiError>) -> Response {
    let c = match checked {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let head = Head::new(
        endpoint,
        s.next_id.fetch_add(1, Ordering::Relaxed),
        &s.served.id,
    );
    let (tx, rx) = unbounded_channel();
    let job = Job {
        id: head.id.clone(),
        prompt: c.prompt,
        max_tokens: c.max_tokens,
        params: c.params,
        stop: c.stop,
        events: tx,
        queued_at: Instant::now(),
    };
    match s.queue.submit(job) {
        Ok(()) => {}
        Err(SubmitError::Full) => return ApiError::queue_full(s.queue.capacity()).into_response(),
        Err(SubmitError::Closed) => {
            return ApiError::unavailable("the server is shutting down").into_response()
        }
    }
    if c.stream {
        Sse::new(sse(head, rx, c.include_usage)).into_response()
    } else {
        whole(head, rx).await
    }
}

/// Non-streaming: waits for every event, answers once. A client that leaves drops this
/// future and with it the receiver, which stops the generation too.
async fn whole(head: Head, mut rx: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Done {
                finish,
                prompt_tokens,
                completion_tokens,
            } => {
                let usage = Usage {
                    prompt_tokens,
                    completion_tokens,
                };
                return Json(head.complete(&text, finish.as_str(), usage)).into_response();
            }
            Event::Error(msg) => return ApiError::internal(msg).into_response(),
        }
    }
    ApiError::internal("the engine stopped before finishing this request").into_response()
}

fn data(v: &Value) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(v.to_string()))
}

/// Streaming: a chunk per event as it comes, then `[DONE]`. Dropping this stream (the
/// client went away) drops the receiver, which stops the generation at its next token.
fn sse(
    head: Head,
    rx: UnboundedReceiver<Event>,
    include_usage: bool,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let opening = match head.endpoint {
        Endpoint::Chat => vec![data(&head.chunk(true, Some(""), None))],
        Endpoint::Completion => vec![],
    };
    let h = head.clone();
    let events = UnboundedReceiverStream::new(rx).flat_map(move |ev| {
        let out = match ev {
            Event::Text(t) => vec![data(&h.chunk(false, Some(&t), None))],
            Event::Done {
                finish,
                prompt_tokens,
                completion_tokens,
            } => {
                let mut v = vec![data(&h.chunk(false, None, Some(finish.as_str())))];
                if include_usage {
                    v.push(data(&h.usage_chunk(Usage {
                        prompt_tokens,
                        completion_tokens,
                    })));
                }
                v
            }
            Event::Error(msg) => vec![data(&ApiError::internal(msg).body())],
        };
        stream::iter(out)
    });
    stream::iter(opening)
        .chain(events)
        .chain(stream::once(async {
            Ok(SseEvent::default().data("[DONE]"))
        }))
}
