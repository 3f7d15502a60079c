//! OpenAI request bodies, parsed and checked into what the engine thread needs: prompt
//! ids, a token budget, sampling parameters and stop strings. Every mistake is an
//! [`ApiError`] naming the field at fault; nothing here panics on user input.
//!
//! Decisions (also in README.md):
//! - `max_tokens` (or `max_completion_tokens`) with prompt + max_tokens beyond the context
//!   is a 400 `context_length_exceeded`, as OpenAI and vLLM answer; without `max_tokens`
//!   the budget is the rest of the context.
//! - Defaults follow OpenAI: temperature 1, top_p 1; `top_k` (an extension, 0 or -1 = off)
//!   as vLLM. Without `seed`, each request draws a fresh one.
//! - `n` other than 1 is a 400. Unknown fields are ignored, as OpenAI clients send many.
use super::error::ApiError;
use model::chat::{ChatTemplate, Message};
use model::sampling::SamplingParams;
use model::tokenizer::Tokenizer;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the server serves: the model's name and the text side of it.
pub struct Served {
    /// The name clients give as `model`.
    pub id: String,
    pub tokenizer: Arc<Tokenizer>,
    /// None: messages are joined as plain text (the embedded model, or a checkpoint
    /// without a template).
    pub template: Option<ChatTemplate>,
    /// The embedded random-weight model.
    pub embedded: bool,
    /// Positions the engine holds (prompt + completion).
    pub max_context: usize,
    pub vocab_size: usize,
}

/// A checked request, ready for the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub stop: Vec<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
}

/// Fields both endpoints share.
#[derive(Deserialize)]
struct Common {
    model: Option<String>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    seed: Option<i64>,
    stop: Option<Value>,
    n: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct ChatFields {
    messages: Vec<Value>,
    /// Qwen3's switch, as a top-level extra field...
    enable_thinking: Option<bool>,
    /// ...or the way vLLM takes it.
    chat_template_kwargs: Option<TemplateKwargs>,
}

#[derive(Deserialize)]
struct TemplateKwargs {
    enable_thinking: Option<bool>,
}

#[derive(Deserialize)]
struct CompletionFields {
    prompt: Value,
}

/// The body as a JSON object.
pub fn parse_body(bytes: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::invalid(
            None,
            format!("We could not parse the JSON body of your request: {e}"),
        )
    })?;
    if !v.is_object() {
        return Err(ApiError::invalid(
            None,
            "The request body must be a JSON object",
        ));
    }
    Ok(v)
}

/// `T` from the body, or a 400 naming the field: missing, or of the wrong type.
fn typed<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if let Some(field) = inner
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            let param = if path == "." {
                field.to_string()
            } else {
                format!("{path}.{field}")
            };
            return ApiError::invalid(
                Some(&param),
                format!("Missing required parameter: '{param}'."),
            );
        }
        ApiError::invalid(Some(&path), format!("Invalid type for '{path}': {inner}"))
    })
}

fn check_model(asked: &Option<String>, served: &Served) -> Result<(), ApiError> {
    match asked {
        Some(m) if m != &served.id => Err(ApiError::model_not_found(m, &served.id)),
        _ => Ok(()),
    }
}

/// A seed for requests that give none: different for each.
fn fresh_seed() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    now ^ COUNT
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn sampling(c: &Common) -> Result<SamplingParams, ApiError> {
    if let Some(n) = c.n {
        if n != 1 {
            return Err(ApiError::invalid(
                Some("n"),
                format!("n = {n}: this server returns one choice per request (n = 1)"),
            ));
        }
    }
    let temperature = c.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            Some("temperature"),
            format!("temperature {temperature} must be between 0 and 2"),
        ));
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            Some("top_p"),
            format!("top_p {top_p} must be in (0, 1]"),
        ));
    }
    let top_k = match c.top_k.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 => k as usize,
        k => {
            return Err(ApiError::invalid(
                Some("top_k"),
                format!("top_k {k} must be a positive integer, or 0 or -1 for no cut"),
            ))
        }
    };
    Ok(SamplingParams {
        temperature: temperature as f32,
        top_k,
        top_p: top_p as f32,
        seed: c.seed.map(|s| s as u64).unwrap_or_else(fresh_seed),
    })
}

const MAX_STOPS: usize = 16;

fn stops(v: &Option<Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::invalid(
            Some("stop"),
            "stop must be a string or an array of non-empty strings",
        )
    };
    let list = match v {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if list.iter().any(String::is_empty) {
        return Err(bad());
    }
    if list.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            Some("stop"),
            format!("at most {MAX_STOPS} stop strings"),
        ));
    }
    Ok(list)
}

/// The parts common to both endpoints, once the prompt is ids.
fn finish(
    c: &Common,
    served: &Served,
    prompt: Vec<u32>,
    prompt_param: &str,
) -> Result<Checked, ApiError> {
    let params = sampling(c)?;
    let stop = stops(&c.stop)?;
    let ctx = served.max_context;
    let n = prompt.len();
    if n == 0 {
        return Err(ApiError::invalid(
            Some(prompt_param),
            "the prompt is empty (no tokens)",
        ));
    }
    if let Some(&bad) = prompt.iter().find(|&&id| id as usize >= served.vocab_size) {
        return Err(ApiError::invalid(
            Some(prompt_param),
            format!(
                "token id {bad} is out of range (vocab_size {})",
                served.vocab_size
            ),
        ));
    }
    if n >= ctx {
        return Err(ApiError::invalid(
            Some(prompt_param),
            format!(
                "This model's maximum context length is {ctx} tokens. However, your prompt is {n} tokens, which leaves no room for a completion. Please shorten it."
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let (asked, param) = match (c.max_tokens, c.max_completion_tokens) {
        (Some(m), _) => (Some(m), "max_tokens"),
        (None, m) => (m, "max_completion_tokens"),
    };
    let max_tokens = match asked {
        None => ctx - n,
        Some(0) => {
            return Err(ApiError::invalid(
                Some(param),
                format!("{param} must be at least 1"),
            ))
        }
        Some(m) if n as u64 + m > ctx as u64 => {
            return Err(ApiError::invalid(
                Some(param),
                format!(
                    "This model's maximum context length is {ctx} tokens. However, you requested {} tokens ({n} in the prompt, {m} in the completion). Please reduce the prompt or {param}.",
                    n as u64 + m
                ),
            )
            .with_code("context_length_exceeded"))
        }
        Some(m) => m as usize,
    };
    let stream = c.stream.unwrap_or(false);
    let include_usage = stream
        && c.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
    Ok(Checked {
        prompt,
        max_tokens,
        params,
        stop,
        stream,
        include_usage,
    })
}

fn encode(served: &Served, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
    served
        .tokenizer
        .encode(text)
        .map_err(|e| ApiError::invalid(Some(param), e.to_string()))
}

/// One message's text: a string, an array of text parts, or null (empty).
fn content_text(v: Option<&Value>, param: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (
                    p.get("type").and_then(Value::as_str),
                    p.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            Some(&format!("{param}[{j}]")),
                            "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                        ))
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(ApiError::invalid(
            Some(param),
            "content must be a string or an array of text parts",
        )),
    }
}

fn messages(raw: &[Value]) -> Result<Vec<Message>, ApiError> {
    if raw.is_empty() {
        return Err(ApiError::invalid(
            Some("messages"),
            "messages must hold at least one message",
        ));
    }
    raw.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(
                    Some(&format!("messages[{i}].role")),
                    "each message needs a string role",
                )
            })?;
            let role = match role {
                "system" | "user" | "assistant" | "tool" => role,
                // OpenAI's newer name for system.
                "developer" => "system",
                _ => {
                    return Err(ApiError::invalid(
                        Some(&format!("messages[{i}].role")),
                        format!(
                            "unknown role '{role}' (expected system, user, assistant, tool or developer)"
                        ),
                    ))
                }
            };
            Ok(Message {
                role: role.to_string(),
                content: content_text(m.get("content"), &format!("messages[{i}].content"))?,
            })
        })
        .collect()
}

/// `POST /v1/chat/completions`: messages through the chat template.
pub fn chat(body: &Value, served: &Served) -> Result<Checked, ApiError> {
    let c: Common = typed(body)?;
    check_model(&c.model, served)?;
    let f: ChatFields = typed(body)?;
    let msgs = messages(&f.messages)?;
    let thinking = f
        .enable_thinking
        .or(f.chat_template_kwargs.and_then(|k| k.enable_thinking))
        .unwrap_or(true);
    let text = match &served.template {
        Some(t) => t
            .render(&msgs, thinking)
            .map_err(|e| ApiError::invalid(Some("messages"), e.to_string()))?,
        // No template: the contents as plain text, as `generate` does for one prompt.
        None => msgs
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let prompt = encode(served, &text, "messages")?;
    finish(&c, served, prompt, "messages")
}

/// `POST /v1/completions`: a raw prompt (text, or an array of token ids).
pub fn completion(body: &Value, served: &Served) -> Result<Checked, ApiError> {
    let c: Common = typed(body)?;
    check_model(&c.model, served)?;
    let f: CompletionFields = typed(body)?;
    let bad = || {
        ApiError::invalid(
            Some("prompt"),
            "prompt must be a string or an array of token ids (one prompt per request)",
        )
    };
    let prompt = match &f.prompt {
        Value::String(s) => encode(served, s, "prompt")?,
        Value::Array(a) if a.len() == 1 && a[0].is_string() => {
            encode(served, a[0].as_str().unwrap_or_default(), "prompt")?
        }
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(bad)
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(bad()),
    };
    finish(&c, served, prompt, "prompt")
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::tokenizer::ByteTokenizer;
    use serde_json::json;

    fn served() -> Served {
        Served {
            id: "m".into(),
            tokenizer: Arc::new(Tokenizer::Bytes(ByteTokenizer { specials: vec![] })),
            template: None,
            embedded: true,
            max_context: 16,
            vocab_size: 256,
        }
    }

    fn err(r: Result<Checked, ApiError>) -> (u16, Option<String>, String) {
        let e = r.expect_err("should fail");
        (e.status.as_u16(), e.param, e.message)
    }

    #[test]
    fn defaults_and_budget() {
        let s = served();
        let c = completion(&json!({"prompt": "abcd"}), &s).unwrap();
        assert_eq!(c.prompt, vec![97, 98, 99, 100]);
        assert_eq!(c.max_tokens, 12, "the rest of the context");
        assert_eq!(c.params.temperature, 1.0);
        assert!(!c.stream);
        let c = chat(
            &json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    "max_tokens": 3, "stop": "x", "temperature": 0, "stream": true,
                    "stream_options": {"include_usage": true}}),
            &s,
        )
        .unwrap();
        assert_eq!((c.prompt.len(), c.max_tokens), (2, 3));
        assert_eq!(c.stop, vec!["x"]);
        assert!(c.params.is_greedy() && c.stream && c.include_usage);
    }

    #[test]
    fn mistakes_name_their_field() {
        let s = served();
        let (st, p, m) = err(chat(&json!({"model": "m"}), &s));
        assert_eq!((st, p.as_deref()), (400, Some("messages")));
        assert!(m.contains("Missing required parameter"), "{m}");
        let (_, p, m) = err(chat(&json!({"messages": "hi"}), &s));
        assert_eq!(p.as_deref(), Some("messages"), "{m}");
        let (_, p, _) = err(completion(&json!({"prompt": "a", "max_tokens": "ten"}), &s));
        assert_eq!(p.as_deref(), Some("max_tokens"));
        let (_, p, _) = err(completion(&json!({"prompt": "a", "n": 2}), &s));
        assert_eq!(p.as_deref(), Some("n"));
        let (_, p, _) = err(completion(&json!({"prompt": "a", "stop": [1]}), &s));
        assert_eq!(p.as_deref(), Some("stop"));
        let (_, p, _) = err(completion(&json!({"prompt": "a", "temperature": 3}), &s));
        assert_eq!(p.as_deref(), Some("temperature"));
        let (st, _, _) = err(completion(&json!({"prompt": "a", "model": "other"}), &s));
        assert_eq!(st, 404);
        let (_, p, _) = err(chat(
            &json!({"messages": [{"role": "wizard", "content": "x"}]}),
            &s,
        ));
        assert_eq!(p.as_deref(), Some("messages[0].role"));
        let (_, p, _) = err(completion(&json!({"prompt": [1, 999]}), &s));
        assert_eq!(p.as_deref(), Some("prompt"));
    }

    #[test]
    fn context_limits() {
        let s = served();
        let long = "x".repeat(16);
        let e = completion(&json!({"prompt": long}), &s).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        let e = completion(&json!({"prompt": "abcd", "max_tokens": 13}), &s).unwrap_err();
        assert_eq!(
            (e.param.as_deref(), e.code),
            (Some("max_tokens"), Some("context_length_exceeded"))
        );
        assert!(e
            .message
            .contains("17 tokens (4 in the prompt, 13 in the completion)"));
        assert!(completion(&json!({"prompt": "abcd", "max_tokens": 12}), &s).is_ok());
        let e = completion(&json!({"prompt": "a", "max_tokens": 0}), &s).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
    }

    #[test]
    fn body_must_be_a_json_object() {
        assert!(parse_body(b"{not json")
            .unwrap_err()
            .message
            .contains("parse the JSON"));
        assert!(parse_body(b"[1]").is_err());
        assert!(parse_body(b"{}").is_ok());
    }
}
