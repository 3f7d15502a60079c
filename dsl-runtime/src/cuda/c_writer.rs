//! The one way generated C is written, by the kernel emitter (`cuda/`) and the persistent
//! kernel (`mega/`): lines at the current depth, blocks that indent what they hold.
//! Callers never write indentation themselves, so nesting code moves it with no edits.

/// C text being written, two spaces per level of nesting.
pub(crate) struct CWriter {
    text: String,
    depth: usize,
}

impl CWriter {
    /// A writer whose lines start `depth` levels in (1: the statements of a function).
    pub fn new(depth: usize) -> CWriter {
        CWriter {
            text: String::new(),
            depth,
        }
    }

    /// One line at the current depth.
    pub fn line(&mut self, s: impl AsRef<str>) {
        for _ in 0..self.depth {
            self.text.push_str("  ");
        }
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }

    /// A line that opens a block (`for (...) {`): the lines after it go one level in.
    pub fn open(&mut self, s: impl AsRef<str>) {
        self.line(s);
        self.indent();
    }

    /// A line that closes a block (`}`), one level out.
    pub fn close(&mut self, s: impl AsRef<str>) {
        self.dedent();
        self.line(s);
    }

    /// One level in, with no line (for a caller that writes lines of its own around it).
    pub fn indent(&mut self) {
        self.depth += 1;
    }

    /// One level out, with no line.
    pub fn dedent(&mut self) {
        self.depth -= 1;
    }

    /// An empty line (no indentation).
    pub fn blank(&mut self) {
        self.text.push('\n');
    }

    /// Text written elsewhere (a prelude, another writer's function), as it is: it carries
    /// its own indentation and ends with a newline.
    pub fn paste(&mut self, s: &str) {
        self.text.push_str(s);
    }

    /// What was written so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn finish(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::CWriter;

    #[test]
    fn blocks_indent_what_they_hold() {
        let mut w = CWriter::new(1);
        w.open("if (a) {");
        w.line("x = 1;");
        w.close("}");
        w.open("if (b) {");
        w.line("x = 2;");
        w.close("}");
        w.blank();
        w.paste("// as is\n");
        assert_eq!(
            w.finish(),
            "  if (a) {\n    x = 1;\n  }\n  if (b) {\n    x = 2;\n  }\n\n// as is\n"
        );
    }
}
