//! Text ↔ ids: a Hugging Face `tokenizer.json`, or the embedded model's byte tokenizer;
//! plus streaming detokenization that only emits complete UTF-8.
use crate::error::ModelError;
use std::path::Path;

/// Ids 0..256 are the bytes; then a few specials (skipped when decoding).
#[derive(Debug, Clone)]
pub struct ByteTokenizer {
    pub specials: Vec<String>,
}

impl ByteTokenizer {
    pub fn vocab_size(&self) -> usize {
        256 + self.specials.len()
    }
}

pub enum Tokenizer {
    Hf(Box<tokenizers::Tokenizer>),
    Bytes(ByteTokenizer),
}

impl Tokenizer {
    pub fn from_file(path: &Path) -> Result<Tokenizer, ModelError> {
        let t = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer::Hf(Box::new(t)))
    }

    /// Ids for `text`, adding no special tokens (the chat template already has them,
    /// as transformers' apply_chat_template does).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        match self {
            Tokenizer::Hf(t) => t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| ModelError::Tokenizer(format!("encode: {e}"))),
            Tokenizer::Bytes(_) => Ok(text.bytes().map(u32::from).collect()),
        }
    }

    /// Text for `ids`, skipping special tokens; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        match self {
            Tokenizer::Hf(t) => t
                .decode(ids, true)
                .map_err(|e| ModelError::Tokenizer(format!("decode: {e}"))),
            Tokenizer::Bytes(_) => {
                let bytes: Vec<u8> = ids.iter().filter(|&&i| i < 256).map(|&i| i as u8).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    }
}

/// Incremental detokenizer: decodes a sliding window of ids and emits new text only
/// once it no longer ends in an incomplete character (U+FFFD), since a multi-byte
/// character may be split across tokens. Decoding a window rather than single ids keeps
/// tokenizer-specific joining (spaces, byte fallback) right.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    prev: usize,
    current: usize,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one id; returns the newly completed text, if any.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<Option<String>, ModelError> {
        let prev_text = tok.decode(&self.ids[self.prev..self.current])?;
        self.ids.push(id);
        let text = tok.decode(&self.ids[self.prev..])?;
        if text.len() > prev_text.len() && !text.ends_with('\u{FFFD}') {
            let new = new_suffix(&text, &prev_text);
            self.prev = self.current;
            self.current = self.ids.len();
            Ok(Some(new))
        } else {
            Ok(None)
        }
    }

    /// Whatever is still held back (e.g. a truncated character at the end).
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<Option<String>, ModelError> {
        let prev_text = tok.decode(&self.ids[self.prev..self.current])?;
        let text = tok.decode(&self.ids[self.prev..])?;
        self.prev = self.ids.len();
        self.current = self.ids.len();
        Ok((text.len() > prev_text.len()).then(|| new_suffix(&text, &prev_text)))
    }
}

fn new_suffix(text: &str, prev: &str) -> String {
    match text.strip_prefix(prev) {
        Some(s) => s.to_string(),
        // The window's decoding changed earlier text; emit from the first char boundary.
        None => {
            let mut at = prev.len().min(text.len());
            while !text.is_char_boundary(at) {
                at += 1;
            }
            text[at..].to_string()
        }
    }
}
