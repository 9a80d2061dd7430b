//! Percent-encoding as S3, SigV4 and the peer API use it: every byte but the unreserved
//! characters of RFC 3986 (letters, digits, `-`, `_`, `.`, `~`) as `%XX`, and back.

use std::fmt::Write as _;

/// `s` with every byte but the unreserved characters as `%XX` (upper-case hex): a path
/// segment or a query value as SigV4 signs it.
#[must_use]
pub fn encode(s: &str) -> String {
    encode_keeping(s, b"")
}

/// [`encode`], keeping `/` as it is: keys in listings with `encoding-type=url`, as S3
/// sends them.
#[must_use]
pub fn encode_path(s: &str) -> String {
    encode_keeping(s, b"/")
}

fn encode_keeping(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || keep.contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `%XX` sequences decoded (a `%` without two hex digits after it stays as it is);
/// `None` when they are not hex or do not make UTF-8.
#[must_use]
pub fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_characters_stay_and_the_rest_round_trip() {
        assert_eq!(encode("a b+c/d"), "a%20b%2Bc%2Fd");
        assert_eq!(encode("ü~x"), "%C3%BC~x");
        assert_eq!(encode_path("a b/ü+%"), "a%20b/%C3%BC%2B%25");
        for s in ["a b+c/d", "ü~x", "", "%"] {
            assert_eq!(decode(&encode(s)).as_deref(), Some(s));
        }
        assert_eq!(decode("/b/a%20b%2Fc").as_deref(), Some("/b/a b/c"));
        assert_eq!(decode("/b/50%").as_deref(), Some("/b/50%"));
        assert_eq!(decode("/b/%ff"), None);
        assert_eq!(decode("/b/%zz"), None);
    }
}
