//! Bucket policies: the subset of S3's policy language that makes a bucket, or keys of it,
//! readable by anyone (`docs/access.md`, "Anonymous read").
//!
//! A policy is accepted only when every part of it is understood: statements that
//! `Allow` the principal `"*"` the actions `s3:GetObject` (on object resources, with `*`
//! and `?` wildcards) and `s3:ListBucket` (on the bucket, optionally only for listings
//! whose `prefix` matches a `StringLike` or `StringEquals` condition on `s3:prefix`).
//! Anything else is refused with a message that names it ([`PolicyError`]), never taken
//! and ignored.

use serde_json::{Map, Value};

/// The largest policy S3 takes: 20 KiB.
pub const POLICY_MAX: usize = 20 * 1024;

/// A parsed policy: what it lets anyone do. Patterns are kept as characters, ready for
/// [`glob_chars`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Key patterns anyone may GET and HEAD.
    objects: Vec<Vec<char>>,
    /// Listing: `None` when no statement allows it; `Some(patterns)` for the prefixes it
    /// is allowed under (see `list_any`).
    list: Option<Vec<Vec<char>>>,
    /// Whether some statement allows a listing with any prefix.
    list_any: bool,
}

/// Why a policy was refused (S3's `MalformedPolicy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

fn refuse<T>(msg: impl Into<String>) -> Result<T, PolicyError> {
    Err(PolicyError(msg.into()))
}

const GET_OBJECT: &str = "s3:getobject";
const LIST_BUCKET: &str = "s3:listbucket";

impl Policy {
    /// Parses `text`, the policy of `bucket`.
    ///
    /// # Errors
    /// [`PolicyError`], saying what is not valid or not supported.
    pub fn parse(bucket: &str, text: &str) -> Result<Self, PolicyError> {
        if text.len() > POLICY_MAX {
            return refuse(format!(
                "Policies must be at most {POLICY_MAX} bytes; this one has {}",
                text.len()
            ));
        }
        let doc: Value = serde_json::from_str(text)
            .map_err(|e| PolicyError(format!("Policies must be valid JSON: {e}")))?;
        let Value::Object(doc) = doc else {
            return refuse("Policies must be a JSON object");
        };
        let mut statements = None;
        for (field, value) in &doc {
            match field.as_str() {
                "Version" => match value.as_str() {
                    Some("2012-10-17" | "2008-10-17") => {}
                    _ => return refuse("Version must be \"2012-10-17\" or \"2008-10-17\""),
                },
                "Id" if value.is_string() => {}
                "Id" => return refuse("Id must be a string"),
                "Statement" => statements = Some(value),
                other => return refuse(format!("Unsupported policy field {other:?}")),
            }
        }
        let statements = match statements {
            Some(Value::Array(v)) => v.iter().collect::<Vec<_>>(),
            Some(v @ Value::Object(_)) => vec![v],
            Some(_) => return refuse("Statement must be an object or a list of objects"),
            None => return refuse("Missing required field Statement"),
        };
        if statements.is_empty() {
            return refuse("Statement must not be empty");
        }
        let mut policy = Self::default();
        for s in statements {
            let Value::Object(s) = s else {
                return refuse("Each statement must be a JSON object");
            };
            policy.statement(bucket, s)?;
        }
        Ok(policy)
    }

    fn statement(&mut self, bucket: &str, s: &Map<String, Value>) -> Result<(), PolicyError> {
        let (mut effect, mut principal, mut actions, mut resources, mut condition) =
            (None, None, None, None, None);
        for (field, value) in s {
            match field.as_str() {
                "Sid" if value.is_string() => {}
                "Sid" => return refuse("Sid must be a string"),
                "Effect" => effect = Some(value),
                "Principal" => principal = Some(value),
                "Action" => actions = Some(strings("Action", value)?),
                "Resource" => resources = Some(strings("Resource", value)?),
                "Condition" => condition = Some(value),
                "NotPrincipal" | "NotAction" | "NotResource" => {
                    return refuse(format!("{field} is not supported"));
                }
                other => return refuse(format!("Unsupported statement field {other:?}")),
            }
        }
        match effect.and_then(Value::as_str) {
            Some("Allow") => {}
            Some("Deny") => {
                return refuse("Effect \"Deny\" is not supported: only \"Allow\" of public reads");
            }
            _ => return refuse("Effect must be \"Allow\""),
        }
        if !principal.is_some_and(is_everyone) {
            return refuse(
                "Only Principal \"*\" (anyone) is supported; give keys rights with `oedd admin bucket allow`",
            );
        }
        let Some(actions) = actions else {
            return refuse("Missing required field Action");
        };
        let Some(resources) = resources else {
            return refuse("Missing required field Resource");
        };
        let prefixes = match condition {
            None => None,
            Some(c) => Some(prefix_condition(c)?),
        };
        let mut objects = Vec::new();
        let mut on_bucket = false;
        for r in &resources {
            let Some(rest) = r.strip_prefix("arn:aws:s3:::") else {
                return refuse(format!("Policy has invalid resource {r:?}"));
            };
            match rest.split_once('/') {
                None if rest == bucket => on_bucket = true,
                Some((b, pattern)) if b == bucket => objects.push(pattern.to_owned()),
                _ => {
                    return refuse(format!(
                        "Policy has invalid resource {r:?}: not bucket {bucket:?} or its objects"
                    ));
                }
            }
        }
        let mut get = false;
        let mut list = false;
        for a in &actions {
            match a.to_ascii_lowercase().as_str() {
                GET_OBJECT => get = true,
                LIST_BUCKET => list = true,
                _ => {
                    return refuse(format!(
                        "Action {a:?} is not supported: only s3:GetObject and s3:ListBucket"
                    ));
                }
            }
        }
        if (get && objects.is_empty()) || (list && !on_bucket) {
            return refuse("Action does not apply to any resource(s) in statement");
        }
        if prefixes.is_some() && get {
            return refuse(
                "Condition s3:prefix applies to s3:ListBucket only; put s3:GetObject in a statement of its own",
            );
        }
        if get {
            self.objects
                .extend(objects.iter().map(|o| o.chars().collect::<Vec<_>>()));
        }
        if list {
            let l = self.list.get_or_insert_with(Vec::new);
            match prefixes {
                None => self.list_any = true,
                Some(p) => l.extend(p.iter().map(|o| o.chars().collect::<Vec<_>>())),
            }
        }
        Ok(())
    }

    /// Whether anyone may GET (and HEAD) object `key`.
    #[must_use]
    pub fn allows_get(&self, key: &str) -> bool {
        if self.objects.is_empty() {
            return false;
        }
        let key: Vec<char> = key.chars().collect();
        self.objects.iter().any(|p| glob_chars(p, &key))
    }

    /// Whether anyone may list the bucket with `prefix` (empty when none is given).
    #[must_use]
    pub fn allows_list(&self, prefix: &str) -> bool {
        if self.list_any {
            return true;
        }
        let Some(l) = &self.list else { return false };
        let prefix: Vec<char> = prefix.chars().collect();
        l.iter().any(|p| glob_chars(p, &prefix))
    }

    /// Whether some statement allows listings (with any prefix or some).
    #[must_use]
    pub fn lists(&self) -> bool {
        self.list.is_some()
    }

    /// Whether it lets anyone do anything (every accepted policy does).
    #[must_use]
    pub fn is_public(&self) -> bool {
        !self.objects.is_empty() || self.list.is_some()
    }
}

/// `"*"`, `{"AWS": "*"}` or `{"AWS": ["*"]}`.
fn is_everyone(v: &Value) -> bool {
    match v {
        Value::String(s) => s == "*",
        Value::Object(m) if m.len() == 1 => match m.get("AWS") {
            Some(Value::String(s)) => s == "*",
            Some(Value::Array(a)) => !a.is_empty() && a.iter().all(|x| x == "*"),
            _ => false,
        },
        _ => false,
    }
}

/// A string or a non-empty list of strings.
fn strings(field: &str, v: &Value) -> Result<Vec<String>, PolicyError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| PolicyError(format!("{field} must hold strings")))
            })
            .collect(),
        _ => refuse(format!(
            "{field} must be a string or a non-empty list of strings"
        )),
    }
}

/// `{"StringLike" | "StringEquals": {"s3:prefix": pattern(s)}}`: the prefixes it allows
/// (for `StringEquals`, patterns whose wildcards are escaped away: none are kept).
fn prefix_condition(c: &Value) -> Result<Vec<String>, PolicyError> {
    let Value::Object(c) = c else {
        return refuse("Condition must be a JSON object");
    };
    if c.len() != 1 {
        return refuse(
            "Condition must have one operator (StringLike or StringEquals) on s3:prefix; several would all have to hold, which is not supported",
        );
    }
    let mut out = Vec::new();
    for (op, keys) in c {
        let like = match op.as_str() {
            "StringLike" => true,
            "StringEquals" => false,
            other => {
                return refuse(format!(
                    "Condition operator {other:?} is not supported: only StringLike and StringEquals on s3:prefix"
                ));
            }
        };
        let Value::Object(keys) = keys else {
            return refuse(format!("Condition {op} must be a JSON object"));
        };
        if keys.len() != 1 {
            return refuse(format!("Condition {op} must name s3:prefix, once"));
        }
        for (key, values) in keys {
            if !key.eq_ignore_ascii_case("s3:prefix") {
                return refuse(format!(
                    "Condition key {key:?} is not supported: only s3:prefix"
                ));
            }
            for v in strings("Condition value", values)? {
                if like {
                    out.push(v);
                } else if v.contains(['*', '?']) {
                    return refuse(
                        "StringEquals values with * or ? are not supported; use StringLike",
                    );
                } else {
                    out.push(v);
                }
            }
        }
    }
    if out.is_empty() {
        return refuse("Condition must name s3:prefix");
    }
    Ok(out)
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (none
/// included) and `?` any one character.
#[must_use]
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob_chars(&p, &t)
}

/// [`glob`] of characters. Keeps one backtrack point (the last `*`): linear for a pattern
/// with one `*`, at worst the pattern's length times the text's (a 20 KiB policy against
/// a 1 KiB key: some 20 million steps, the policy's owner's choice).
#[must_use]
pub fn glob_chars(p: &[char], t: &[char]) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || (p[i] != '*' && p[i] == t[j])) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC: &str = r#"{
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "read", "Effect": "Allow", "Principal": "*",
             "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/public/*"},
            {"Effect": "Allow", "Principal": {"AWS": ["*"]},
             "Action": ["s3:ListBucket"], "Resource": ["arn:aws:s3:::data"],
             "Condition": {"StringLike": {"s3:prefix": ["public/*", "public/"]}}}
        ]}"#;

    #[test]
    fn a_prefix_is_public_and_nothing_else() {
        let p = Policy::parse("data", PUBLIC).unwrap();
        assert!(p.is_public());
        assert!(p.allows_get("public/a.csv"));
        assert!(p.allows_get("public/"));
        assert!(!p.allows_get("private/a.csv"));
        assert!(!p.allows_get("publicity"));
        assert!(p.allows_list("public/"));
        assert!(p.allows_list("public/x/"));
        assert!(!p.allows_list(""));
        assert!(!p.allows_list("private/"));
    }

    #[test]
    fn a_whole_bucket_is_public() {
        let text = r#"{"Statement": {"Effect": "Allow", "Principal": {"AWS": "*"},
            "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]}}"#;
        let p = Policy::parse("b", text).unwrap();
        assert!(p.allows_get("any/key"));
        assert!(p.allows_list(""));
        assert!(p.allows_list("x"));
    }

    #[test]
    fn what_is_not_understood_is_refused_by_name() {
        let cases = [
            ("", "valid JSON"),
            ("[]", "JSON object"),
            (
                r#"{"Version": "2012-10-17"}"#,
                "Missing required field Statement",
            ),
            (r#"{"Statement": []}"#, "must not be empty"),
            (
                r#"{"Statement": [], "Foo": 1}"#,
                "Unsupported policy field \"Foo\"",
            ),
            (
                r#"{"Statement": {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}}"#,
                "Deny",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:root"}, "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}}"#,
                "Principal",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*"}}"#,
                "s3:PutObject",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b/*"}}"#,
                "\"s3:*\" is not supported",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*"}}"#,
                "invalid resource",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b"}}"#,
                "Action does not apply",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b", "Condition": {"StringLike": {"s3:prefix": "a*"}, "StringEquals": {"s3:prefix": "b"}}}}"#,
                "one operator",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b", "Condition": {"StringLike": {"s3:prefix": "a*", "S3:Prefix": "b"}}}}"#,
                "once",
            ),
            (r#"{"Id": 5, "Statement": []}"#, "Id must be a string"),
            (
                r#"{"Statement": {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*", "Condition": {"IpAddress": {"aws:SourceIp": "1.2.3.4"}}}}"#,
                "not supported",
            ),
            (
                r#"{"Statement": {"Effect": "Allow", "NotPrincipal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}}"#,
                "NotPrincipal",
            ),
        ];
        for (text, says) in cases {
            let e = Policy::parse("b", text).unwrap_err();
            assert!(e.0.contains(says), "{text}: {e}");
        }
        let big = format!(r#"{{"Id": "{}"}}"#, "x".repeat(POLICY_MAX));
        assert!(Policy::parse("b", &big).unwrap_err().0.contains("at most"));
    }

    #[test]
    fn the_top_level_and_one_folder_are_listed_and_no_more() {
        let text = r#"{"Statement": [{"Effect": "Allow", "Principal": "*",
            "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b",
            "Condition": {"StringEquals": {"s3:prefix": ["", "home/"]}}},
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": ["arn:aws:s3:::b/home/*", "arn:aws:s3:::b"]}]}"#;
        let p = Policy::parse("b", text).unwrap();
        assert!(p.allows_list(""));
        assert!(p.allows_list("home/"));
        assert!(!p.allows_list("home/x/"));
        assert!(!p.allows_list("private/"));
        assert!(p.allows_get("home/a"));
        assert!(!p.allows_get("b"));
        assert!(!p.allows_get("top"));
    }

    #[test]
    fn globs_match_as_s3_resources_do() {
        assert!(glob("*", ""));
        assert!(glob("a*", "a"));
        assert!(glob("a*c", "abbbc"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*.csv", "x/y.csv"));
        assert!(!glob("*.csv", "x/y.csvx"));
        assert!(glob("a*b*c", "a_b_b_c"));
        assert!(!glob("a*b*c", "a_c_b"));
        assert!(glob("ünï*", "ünïcode"));
        assert!(!glob("exact", "exact2"));
    }
}
