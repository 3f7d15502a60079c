//! Generated ids → the text a client sees: incremental detokenization (only whole UTF-8
//! characters), and `stop` strings matched in that decoded text. Text that might be the
//! start of a stop string is held back until it is known not to be one, so a client never
//! sees any part of a stop string.
use model::tokenizer::{StreamDecoder, Tokenizer};
use model::ModelError;

/// What one token adds: text now safe to send (may be empty), and whether a stop string
/// has just been completed (generation ends; the stop string itself is not sent).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Piece {
    pub text: String,
    pub stopped: bool,
}

pub struct TextStream<'a> {
    tok: &'a Tokenizer,
    decoder: StreamDecoder,
    stops: &'a [String],
    /// Decoded so far (cut at a stop string once one matched).
    text: String,
    /// Bytes of `text` already released.
    sent: usize,
    stopped: bool,
}

impl<'a> TextStream<'a> {
    pub fn new(tok: &'a Tokenizer, stops: &'a [String]) -> Self {
        TextStream {
            tok,
            decoder: StreamDecoder::new(),
            stops,
            text: String::new(),
            sent: 0,
            stopped: false,
        }
    }

    /// Adds one generated id.
    pub fn push(&mut self, id: u32) -> Result<Piece, ModelError> {
        if self.stopped {
            return Ok(Piece {
                text: String::new(),
                stopped: true,
            });
        }
        if let Some(s) = self.decoder.push(self.tok, id)? {
            self.text.push_str(&s);
        }
        Ok(self.release(false))
    }

    /// The end of generation: whatever the detokenizer and the stop matcher held back.
    pub fn finish(&mut self) -> Result<Piece, ModelError> {
        if self.stopped {
            return Ok(Piece {
                text: String::new(),
                stopped: true,
            });
        }
        if let Some(s) = self.decoder.flush(self.tok)? {
            self.text.push_str(&s);
        }
        Ok(self.release(true))
    }

    /// Everything released so far: the completion's text.
    pub fn text(&self) -> &str {
        &self.text[..self.sent]
    }

    fn release(&mut self, all: bool) -> Piece {
        // A stop string cannot begin in text already released: that text was released
        // only once no suffix of it could begin one.
        let tail = &self.text[self.sent..];
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| tail.find(s.as_str()))
            .min()
        {
            let out = tail[..at].to_string();
            self.sent += at;
            self.text.truncate(self.sent);
            self.stopped = true;
            return Piece {
                text: out,
                stopped: true,
            };
        }
        let hold = if all { 0 } else { self.held_back(tail) };
        let out = tail[..tail.len() - hold].to_string();
        self.sent += out.len();
        Piece {
            text: out,
            stopped: false,
        }
    }

    /// Length of the longest suffix of `tail` that is a proper prefix of a stop string.
    fn held_back(&self, tail: &str) -> usize {
        self.stops
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .rev()
                    .filter(|&k| s.is_char_boundary(k) && tail.ends_with(&s[..k]))
                    .take(1)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::tokenizer::ByteTokenizer;

    fn bytes() -> Tokenizer {
        Tokenizer::Bytes(ByteTokenizer { specials: vec![] })
    }

    /// Feeds `text` byte by byte; returns the pieces and the final text.
    fn run(text: &str, stops: &[&str]) -> (Vec<String>, String, bool) {
        let tok = bytes();
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut ts = TextStream::new(&tok, &stops);
        let mut pieces = vec![];
        for b in text.bytes() {
            let p = ts.push(b as u32).unwrap();
            pieces.push(p.text);
            if p.stopped {
                return (pieces, ts.text().to_string(), true);
            }
        }
        let p = ts.finish().unwrap();
        pieces.push(p.text);
        (pieces, ts.text().to_string(), p.stopped)
    }

    #[test]
    fn no_stops_streams_every_character() {
        let (pieces, text, stopped) = run("héllo", &[]);
        assert_eq!(text, "héllo");
        assert!(!stopped);
        // é is two bytes: its first byte releases nothing.
        assert_eq!(pieces, ["h", "", "é", "l", "l", "o", ""]);
    }

    #[test]
    fn stop_string_cuts_and_is_never_sent() {
        let (pieces, text, stopped) = run("abc\n\nUser: more", &["\n\nUser"]);
        assert!(stopped);
        assert_eq!(text, "abc");
        assert_eq!(pieces.concat(), "abc");
        // The two newlines were held back, then dropped.
        assert!(pieces.iter().all(|p| !p.contains('\n')));
    }

    #[test]
    fn false_start_is_released() {
        let (pieces, text, stopped) = run("a\nb\n", &["\n\n"]);
        assert!(!stopped);
        assert_eq!(text, "a\nb\n");
        assert_eq!(
            pieces,
            ["a", "", "\nb", "", "\n"],
            "held \\n released at the end"
        );
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        let (_, text, stopped) = run("xx END yy STOP", &["STOP", "END"]);
        assert!(stopped);
        assert_eq!(text, "xx ");
        let (_, text, _) = run("stop at the start", &["stop"]);
        assert_eq!(text, "");
    }
}
