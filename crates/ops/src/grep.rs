//! Lines of text that match a literal or a regular expression: counted, and optionally
//! returned (at most [`MAX_LINES`], with their object offsets).
//!
//! A line is the bytes up to and including a `\n`, or the bytes after the last `\n` at the
//! object's end. Runs cut lines anywhere, so each run counts the lines it holds whole and
//! keeps the cut ones as fragments: the bytes before its first `\n` (the end of a line that
//! began before the run), and the bytes after its last `\n` (the start of one that ends
//! after it; empty when the run ends on a `\n`, so that the next run's first bytes are
//! known to start a line). Merging joins fragments that meet and matches the lines they
//! complete, so every line counts exactly once, in whatever runs it lies.

use memchr::memchr_iter;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Most matching lines one operation returns.
pub const MAX_LINES: usize = 1000;
/// Longest line the operation takes, in bytes: a longer one is refused rather than
/// carried from drive to drive whole.
pub const MAX_LINE: usize = 1 << 20;
/// Most bytes a regular expression may compile to.
const REGEX_SIZE: usize = 1 << 20;

/// What a grep operation looks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grep {
    /// The literal or the regular expression (Rust `regex` syntax: linear time, no
    /// backreferences).
    pub pattern: String,
    /// Whether `pattern` is a regular expression (else a literal).
    #[serde(default)]
    pub regex: bool,
    /// Matching lines to return, at most [`MAX_LINES`] (0: count only).
    #[serde(default)]
    pub lines: usize,
}

/// A line that matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Object offset of its first byte.
    pub offset: u64,
    /// The line, without its `\n` (invalid UTF-8 replaced).
    pub text: String,
}

/// Bytes of a line cut by the end of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// Object offset of the first byte.
    pub offset: u64,
    /// Whether the first byte starts a line.
    pub starts_line: bool,
    /// The bytes, base64.
    #[serde(with = "crate::b64")]
    pub bytes: Vec<u8>,
}

/// The partial result of a grep over some runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepPartial {
    /// Whole lines seen.
    pub lines: u64,
    /// Of those, lines that matched.
    pub matches: u64,
    /// Matching lines kept (at most the number asked for), by offset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matched: Vec<Line>,
    /// Cut lines, by offset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<Piece>,
}

/// The finished grep (the `result` of a `grep` operation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepResult {
    /// Lines in the object.
    pub lines: u64,
    /// Lines that matched.
    pub matches: u64,
    /// The first matching lines, as many as asked for.
    pub matched: Vec<Line>,
}

/// A compiled grep, for one object.
#[derive(Clone, Debug)]
pub struct Matcher {
    how: How,
    keep: usize,
    object_len: u64,
}

#[derive(Clone, Debug)]
enum How {
    Literal(Box<memchr::memmem::Finder<'static>>),
    Regex(regex::bytes::Regex),
}

impl Grep {
    /// Compiles the pattern for an object of `object_len` bytes.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for an empty pattern, more lines than [`MAX_LINES`], or a
    /// regular expression that does not parse or compiles too large (too expensive).
    pub fn matcher(&self, object_len: u64) -> Result<Matcher> {
        if self.pattern.is_empty() {
            return Err(Error::BadArgument("grep: the pattern is empty".into()));
        }
        if self.lines > MAX_LINES {
            return Err(Error::BadArgument(format!(
                "grep: at most {MAX_LINES} lines can be returned, not {}",
                self.lines
            )));
        }
        let how = if self.regex {
            let re = regex::bytes::RegexBuilder::new(&self.pattern)
                .size_limit(REGEX_SIZE)
                .dfa_size_limit(REGEX_SIZE)
                .build()
                .map_err(|e| Error::BadArgument(format!("grep: the regular expression: {e}")))?;
            How::Regex(re)
        } else {
            How::Literal(Box::new(
                memchr::memmem::Finder::new(self.pattern.as_bytes()).into_owned(),
            ))
        };
        Ok(Matcher {
            how,
            keep: self.lines,
            object_len,
        })
    }
}

impl Matcher {
    fn is_match(&self, line: &[u8]) -> bool {
        match &self.how {
            How::Literal(f) => f.find(line).is_some(),
            How::Regex(r) => r.is_match(line),
        }
    }

    /// Counts (and keeps) the whole line at `offset`, its `\n` included if it has one.
    fn line(&self, p: &mut GrepPartial, offset: u64, line: &[u8], stitched: bool) {
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        p.lines += 1;
        if self.is_match(text) {
            p.matches += 1;
            // A stitched line (`stitched`) may come before lines already kept: a merge
            // keeps it and cuts the list to the first `keep` by offset at its end.
            if p.matched.len() < self.keep || (stitched && self.keep > 0) {
                p.matched.push(Line {
                    offset,
                    text: String::from_utf8_lossy(text).into_owned(),
                });
            }
        }
    }

    /// The partial of one run: object bytes `offset..offset + bytes.len()`.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the run ends past the object.
    pub fn run(&self, offset: u64, bytes: &[u8]) -> Result<GrepPartial> {
        if offset + bytes.len() as u64 > self.object_len {
            return Err(Error::BadArgument(format!(
                "bytes {offset}..{} are past the object's {}",
                offset + bytes.len() as u64,
                self.object_len
            )));
        }
        let mut p = GrepPartial::default();
        self.push(&mut p, offset, offset == 0, bytes);
        Ok(p)
    }

    /// Folds object bytes `offset..` into `p`: `starts_line` says whether the first byte
    /// starts a line. Lines not whole here become pieces.
    fn push(&self, p: &mut GrepPartial, offset: u64, starts_line: bool, bytes: &[u8]) {
        let mut at = 0;
        let mut line_start = starts_line;
        for nl in memchr_iter(b'\n', bytes) {
            let line = &bytes[at..=nl];
            if line_start {
                self.line(p, offset + at as u64, line, false);
            } else {
                p.pieces.push(Piece {
                    offset,
                    starts_line: false,
                    bytes: line.to_vec(),
                });
            }
            at = nl + 1;
            line_start = true;
        }
        let rest = &bytes[at..];
        let end = offset + bytes.len() as u64;
        if line_start && end == self.object_len {
            // The object's last line, without a `\n`.
            if !rest.is_empty() {
                self.line(p, offset + at as u64, rest, false);
            }
        } else {
            // Kept even when empty: it says the next run starts a line.
            p.pieces.push(Piece {
                offset: offset + at as u64,
                starts_line: line_start,
                bytes: rest.to_vec(),
            });
        }
    }

    /// The partial of `left`'s runs followed by `right`'s: pieces that meet are joined and
    /// the lines they complete are matched.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when a joined line grows past [`MAX_LINE`].
    pub fn merge(&self, mut left: GrepPartial, right: GrepPartial) -> Result<GrepPartial> {
        left.lines += right.lines;
        left.matches += right.matches;
        left.matched.extend(right.matched);
        left.pieces.extend(right.pieces);
        // An empty piece (a run's end on a `\n`) first: what follows at its offset starts
        // a line, whichever partial came first.
        left.pieces.sort_by_key(|p| (p.offset, !p.bytes.is_empty()));
        let mut joined: Vec<Piece> = Vec::with_capacity(left.pieces.len());
        for mut piece in std::mem::take(&mut left.pieces) {
            match joined.last_mut() {
                // The rest of a cut line: joined to it.
                Some(last)
                    if last.offset + last.bytes.len() as u64 == piece.offset
                        && last.bytes.last() != Some(&b'\n') =>
                {
                    last.bytes.extend_from_slice(&piece.bytes);
                }
                // Right after a line's `\n`: a line starts here.
                Some(last) if last.offset + last.bytes.len() as u64 == piece.offset => {
                    piece.starts_line = true;
                    joined.push(piece);
                }
                _ => joined.push(piece),
            }
        }
        for piece in joined {
            let end = piece.offset + piece.bytes.len() as u64;
            let whole = piece.starts_line
                && (piece.bytes.last() == Some(&b'\n')
                    || (end == self.object_len && !piece.bytes.is_empty()));
            if !whole {
                if piece.bytes.len() > MAX_LINE {
                    return Err(Error::BadArgument(format!(
                        "grep: a line at offset {} is longer than {MAX_LINE} bytes",
                        piece.offset
                    )));
                }
                left.pieces.push(piece);
                continue;
            }
            let mut at = piece.offset;
            for line in piece.bytes.split_inclusive(|&b| b == b'\n') {
                self.line(&mut left, at, line, true);
                at += line.len() as u64;
            }
        }
        left.matched.sort_by_key(|l| l.offset);
        left.matched.truncate(self.keep);
        Ok(left)
    }

    /// The answer, from the partial of the whole object.
    ///
    /// # Errors
    /// [`Error::Incomplete`] when a cut line was never completed.
    pub fn finish(&self, p: &GrepPartial) -> Result<GrepResult> {
        if let Some(piece) = p
            .pieces
            .iter()
            .find(|x| !x.bytes.is_empty() || x.offset != self.object_len)
        {
            return Err(Error::Incomplete(format!(
                "a line cut at offset {} was never completed",
                piece.offset
            )));
        }
        Ok(GrepResult {
            lines: p.lines,
            matches: p.matches,
            matched: p.matched.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text(seed: u64, len: usize) -> Vec<u8> {
        // Words and newlines, some lines empty, some long.
        let words: [&[u8]; 6] = [b"error ", b"ok ", b"\n", b"warn: disk ", b"\n\n", b"x"];
        let mut out = Vec::with_capacity(len);
        let mut x = seed | 1;
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(words[(x % 6) as usize]);
        }
        out.truncate(len);
        out
    }

    /// What grep over the whole object must say, the plain way.
    fn reference(bytes: &[u8], pattern: &str, keep: usize) -> GrepResult {
        let mut r = GrepResult {
            lines: 0,
            matches: 0,
            matched: Vec::new(),
        };
        let mut at = 0;
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let t = line.strip_suffix(b"\n").unwrap_or(line);
            r.lines += 1;
            if t.windows(pattern.len()).any(|w| w == pattern.as_bytes()) {
                r.matches += 1;
                if r.matched.len() < keep {
                    r.matched.push(Line {
                        offset: at,
                        text: String::from_utf8_lossy(t).into_owned(),
                    });
                }
            }
            at += line.len() as u64;
        }
        r
    }

    proptest! {
        /// Runs cut anywhere (mid-line, on newlines, inside long lines), merged in any
        /// grouping, count and return exactly what one pass over the object does.
        #[test]
        fn cut_lines_are_counted_once(len in 0usize..5000, seed: u64, cuts in prop::collection::vec(0usize..5000, 0..12), split in 0usize..14) {
            let bytes = text(seed, len);
            let g = Grep { pattern: "error".into(), regex: false, lines: 7 };
            let m = g.matcher(len as u64).unwrap();
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < len).collect();
            bounds.extend([0, len]);
            bounds.sort_unstable();
            bounds.dedup();
            let parts: Vec<GrepPartial> = bounds.windows(2).map(|w| m.run(w[0] as u64, &bytes[w[0]..w[1]]).unwrap()).collect();
            let at = split.min(parts.len());
            let fold = |ps: &[GrepPartial]| ps.iter().cloned().try_fold(GrepPartial::default(), |a, p| m.merge(a, p)).unwrap();
            let joined = m.merge(fold(&parts[..at]), fold(&parts[at..])).unwrap();
            prop_assert_eq!(m.finish(&joined).unwrap(), reference(&bytes, "error", 7));
            // Merged right to left, as partials may arrive: the same.
            let backward = parts.iter().rev().cloned().try_fold(GrepPartial::default(), |a, p| m.merge(p, a)).unwrap();
            prop_assert_eq!(m.finish(&backward).unwrap(), reference(&bytes, "error", 7));
        }
    }

    #[test]
    fn regexes_match_and_bad_ones_are_refused() {
        let bytes = b"disk 7 failed\nall ok\ndisk 12 failed";
        let g = Grep {
            pattern: r"disk \d+ failed".into(),
            regex: true,
            lines: 5,
        };
        let m = g.matcher(bytes.len() as u64).unwrap();
        let r = m.finish(&m.run(0, bytes).unwrap()).unwrap();
        assert_eq!((r.lines, r.matches), (3, 2));
        assert_eq!(
            r.matched[1],
            Line {
                offset: 21,
                text: "disk 12 failed".into()
            }
        );
        for bad in [r"(unclosed", r"\w{1000}{1000}"] {
            let g = Grep {
                pattern: bad.into(),
                regex: true,
                lines: 0,
            };
            assert!(matches!(g.matcher(10), Err(Error::BadArgument(_))), "{bad}");
        }
        let g = Grep {
            pattern: String::new(),
            regex: false,
            lines: 0,
        };
        assert!(g.matcher(1).is_err());
        let g = Grep {
            pattern: "x".into(),
            regex: false,
            lines: MAX_LINES + 1,
        };
        assert!(g.matcher(1).is_err());
    }
}
