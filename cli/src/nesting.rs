//! How deeply a YAML (or JSON) text nests flow collections (`[…]`, `{…}`), found in one pass
//! before the YAML parser sees the text. libyaml's time grows with the square of that depth
//! (20,000 levels took seconds, 100,000 a minute) before serde_yaml's own recursion limit
//! refuses the document, so a deep text is refused here first.
//!
//! The scan knows YAML's quoted scalars, comments, block scalars (`|`, `>`) and plain
//! scalars, so a bracket inside a string or a literal block is not counted.

/// The deepest nesting a manifest may have. A Kubernetes object nests about ten levels;
/// serde_yaml refuses anything past 128.
pub const MAX_DEPTH: usize = 64;

/// A text nested deeper than [`MAX_DEPTH`]: the line where it first is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooDeep {
    /// 1-based line number.
    pub line: usize,
}

/// Refuses a text whose flow collections nest deeper than [`MAX_DEPTH`].
pub fn check(text: &str) -> Result<(), TooDeep> {
    let mut scan = Scan::default();
    let mut lines = text.split('\n').enumerate().peekable();
    while let Some((number, line)) = lines.next() {
        if let Some(indent) = scan.line(line) {
            // A block scalar: its lines are text, whatever they hold.
            while lines
                .peek()
                .is_some_and(|(_, next)| next.trim().is_empty() || indentation(next) > indent)
            {
                lines.next();
            }
        }
        if scan.deepest > MAX_DEPTH {
            return Err(TooDeep {
                line: number.saturating_add(1),
            });
        }
    }
    Ok(())
}

#[derive(Default)]
struct Scan {
    /// Open flow collections.
    depth: usize,
    /// The most ever open.
    deepest: usize,
    /// Inside a quoted scalar that goes on past the line's end.
    quote: Option<char>,
}

fn indentation(line: &str) -> usize {
    line.len()
        .saturating_sub(line.trim_start_matches(' ').len())
}

impl Scan {
    /// Scans one line; `Some(indentation)` when it opens a block scalar.
    fn line(&mut self, line: &str) -> Option<usize> {
        let chars: Vec<char> = line.trim_end_matches('\r').chars().collect();
        // A document start, `--- [a]`: its node follows the marker.
        let mut i = if self.quote.is_none()
            && chars.starts_with(&['-', '-', '-'])
            && chars.get(3).is_none_or(|c| c.is_whitespace())
        {
            3
        } else {
            0
        };
        // Where a node may start in block context: the line's start, after `- `, `? `, `: `.
        let mut node_start = true;
        let mut previous = ' ';
        while let Some(&c) = chars.get(i) {
            let next = chars.get(i.saturating_add(1)).copied().unwrap_or(' ');
            if let Some(quote) = self.quote {
                if c == '\\' && quote == '"' {
                    i = i.saturating_add(2);
                    continue;
                }
                if c == quote {
                    if quote == '\'' && next == '\'' {
                        i = i.saturating_add(2);
                        continue;
                    }
                    self.quote = None;
                    node_start = false;
                    previous = c;
                    i = i.saturating_add(1);
                    continue;
                }
                previous = c;
                i = i.saturating_add(1);
                continue;
            }
            let blank_next = next == ' ' || next == '\t' || i.saturating_add(1) == chars.len();
            match c {
                '#' if previous == ' ' || previous == '\t' || i == 0 => return None,
                ' ' | '\t' => {}
                // A quote opens a quoted scalar only where a node starts: `don't` is plain text.
                '\'' | '"' if node_start => self.quote = Some(c),
                '[' | '{' if self.depth > 0 || node_start => {
                    self.depth = self.depth.saturating_add(1);
                    self.deepest = self.deepest.max(self.depth);
                    node_start = true;
                }
                ']' | '}' if self.depth > 0 => {
                    self.depth = self.depth.saturating_sub(1);
                    node_start = false;
                }
                ',' if self.depth > 0 => node_start = true,
                '|' | '>' if self.depth == 0 && node_start => return Some(indentation(line)),
                '-' | '?' | ':' if blank_next => node_start = true,
                // JSON's `"key":value` in a flow collection.
                ':' if self.depth > 0 && matches!(previous, '"' | '\'') => node_start = true,
                // An anchor, alias or tag before a node: the node may still start after it.
                '&' | '*' | '!' if node_start => {
                    while chars.get(i).is_some_and(|c| !c.is_whitespace()) {
                        i = i.saturating_add(1);
                    }
                    previous = ' ';
                    continue;
                }
                _ => node_start = false,
            }
            previous = c;
            i = i.saturating_add(1);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(text: &str) -> usize {
        let mut scan = Scan::default();
        for line in text.lines() {
            scan.line(line);
        }
        scan.deepest
    }

    #[test]
    fn flow_collections_count_and_strings_comments_and_plain_text_do_not() {
        assert_eq!(depth("a: [[1], {b: [2]}]"), 3);
        assert_eq!(depth("a: '[[[['\nb: \"{{\\\"[[\"\nc: x[[[[y # [[[["), 0);
        assert_eq!(depth("args: [\"[[[\", '[[''[']"), 1);
        assert_eq!(depth("- - [a, [b]]\n- &x {a: 1}\n- !!seq [1]"), 2);
        assert_eq!(depth("{\"a\": [{\"b\": []}]}"), 4, "JSON is YAML");
        assert_eq!(depth("a: [\n  [\n    1\n  ]\n]"), 2, "across lines");
        assert_eq!(depth("--- [[1]]"), 2, "after a document marker");
        assert_eq!(
            depth("a: don't [[ stop\nb: x 'y\nc: [[1]]"),
            2,
            "a quote inside plain text"
        );
        assert_eq!(
            depth("[a 'b, [[1]]]"),
            3,
            "a quote inside a flow plain scalar"
        );
    }

    #[test]
    fn a_block_scalar_is_text() {
        let text = "script: |\n  [[[[[[\n  {{{{\nnext: [1]\n";
        assert_eq!(check(text), Ok(()));
        let mut deep = String::from("a: |\n");
        deep.push_str(&format!("  {}\n", "[".repeat(100)));
        deep.push_str("b: 1\n");
        assert_eq!(check(&deep), Ok(()));
    }

    #[test]
    fn nesting_past_the_limit_is_refused_at_its_line() {
        let at_limit = format!("a: {}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(check(&at_limit), Ok(()));
        let past = format!(
            "kind: x\na: {}{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(check(&past), Err(TooDeep { line: 2 }));
        let maps = format!(
            "a: {}x{}",
            "{b: ".repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        assert_eq!(check(&maps), Err(TooDeep { line: 1 }));
    }
}
