//! The checkpoint's chat template (Jinja, from `chat_template.jinja` or
//! `tokenizer_config.json`), rendered with minijinja the way transformers does:
//! trim_blocks + lstrip_blocks, Python string methods via minijinja-contrib's pycompat,
//! and `raise_exception`.
use crate::config::read_json;
use crate::error::ModelError;
use minijinja::{context, Environment, Error, ErrorKind};
use serde_json::Value;
use std::path::Path;

pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

/// A special-token entry: a plain string or `{"content": ...}`.
fn token_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    pub fn new(source: String) -> Self {
        ChatTemplate {
            source,
            bos_token: String::new(),
            eos_token: String::new(),
        }
    }

    /// The template shipped in `dir`, if any.
    pub fn from_dir(dir: &Path) -> Result<Option<ChatTemplate>, ModelError> {
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg = if cfg_path.exists() {
            Some(read_json(&cfg_path)?)
        } else {
            None
        };
        let jinja = dir.join("chat_template.jinja");
        let source = if jinja.exists() {
            Some(std::fs::read_to_string(&jinja).map_err(|e| ModelError::io(&jinja, e))?)
        } else {
            match cfg.as_ref().and_then(|c| c.get("chat_template")) {
                Some(Value::String(s)) => Some(s.clone()),
                // A list of named templates: use "default".
                Some(Value::Array(list)) => list
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                _ => None,
            }
        };
        Ok(source.map(|source| ChatTemplate {
            source,
            bos_token: token_text(cfg.as_ref().and_then(|c| c.get("bos_token"))),
            eos_token: token_text(cfg.as_ref().and_then(|c| c.get("eos_token"))),
        }))
    }

    /// The prompt text for one user message, ending with the assistant header.
    pub fn render_user(&self, user: &str, enable_thinking: bool) -> Result<String, ModelError> {
        self.render(
            &[Message {
                role: "user".into(),
                content: user.into(),
            }],
            enable_thinking,
        )
    }

    /// The prompt text for a conversation, ending with the assistant header.
    pub fn render(
        &self,
        messages: &[Message],
        enable_thinking: bool,
    ) -> Result<String, ModelError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        let tmpl = env
            .template_from_str(&self.source)
            .map_err(|e| ModelError::Template(e.to_string()))?;
        let messages: Vec<_> = messages
            .iter()
            .map(|m| context! { role => &m.role, content => &m.content })
            .collect();
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => true,
            enable_thinking => enable_thinking,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(|e| ModelError::Template(e.to_string()))
    }
}

/// One chat message, as the template sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}
