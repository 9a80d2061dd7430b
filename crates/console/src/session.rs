//! Console sessions: a login gives the browser a cookie that names the key, when it
//! expires and a fingerprint of the key's secret, sealed with an HMAC whose key every
//! drive derives from the cluster secret (so any drive takes it). Nothing is kept on a
//! drive: a session ends when it expires, when the key is deleted, or when its secret
//! is rotated (the fingerprint no longer matches). Requests that change something also
//! carry the session's CSRF token, which only a page of the console can read.

use std::time::Duration;

use ring::hmac;
use subtle::ConstantTimeEq;

/// The cookie's name.
pub const COOKIE: &str = "oed_console";

/// The header a page sends its CSRF token in.
pub const CSRF_HEADER: &str = "x-oed-csrf";

/// The path the cookie is sent to.
pub const COOKIE_PATH: &str = "/_oed/console/";

/// What a valid cookie says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    /// The access key id.
    pub key_id: String,
    /// When the session ends, ms since the epoch.
    pub expires_ms: u64,
    /// The fingerprint of the key's secret at login.
    pub fingerprint: String,
}

/// Makes and checks session cookies and CSRF tokens.
pub struct Sessions {
    key: hmac::Key,
    lifetime: Duration,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// Sessions of `lifetime`, sealed with a key derived from `cluster_secret`.
    #[must_use]
    pub fn new(cluster_secret: &[u8], lifetime: Duration) -> Self {
        let root = hmac::Key::new(hmac::HMAC_SHA256, cluster_secret);
        let derived = hmac::sign(&root, b"oed console sessions v1");
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()),
            lifetime,
        }
    }

    /// How long a session lasts.
    #[must_use]
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    fn mac(&self, what: &str, data: &str) -> String {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(what.as_bytes());
        ctx.update(b"\0");
        ctx.update(data.as_bytes());
        hex::encode(ctx.sign().as_ref())
    }

    /// The fingerprint of a key's secret: 16 hex digits of its MAC, so the cookie shows
    /// nothing of the secret and stops working when the secret changes.
    #[must_use]
    pub fn fingerprint(&self, secret: &str) -> String {
        self.mac("fingerprint", secret)[..16].to_owned()
    }

    /// A new session's cookie value for `key_id`, whose secret is `secret`, at `now_ms`.
    #[must_use]
    pub fn issue(&self, key_id: &str, secret: &str, now_ms: u64) -> (String, u64) {
        let expires_ms =
            now_ms.saturating_add(u64::try_from(self.lifetime.as_millis()).unwrap_or(u64::MAX));
        let mut nonce = [0u8; 12];
        // A nonce only makes two sessions of one key in one millisecond differ.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
        let body = format!(
            "{}.{expires_ms}.{}.{}",
            hex::encode(key_id),
            hex::encode(nonce),
            self.fingerprint(secret)
        );
        let mac = self.mac("session", &body);
        (format!("{body}.{mac}"), expires_ms)
    }

    /// What `token` says, if this cluster made it and it has not expired at `now_ms`.
    #[must_use]
    pub fn check(&self, token: &str, now_ms: u64) -> Option<Claims> {
        let (body, mac) = token.rsplit_once('.')?;
        let want = self.mac("session", body);
        if !bool::from(want.as_bytes().ct_eq(mac.as_bytes())) {
            return None;
        }
        let mut parts = body.split('.');
        let key_id = String::from_utf8(hex::decode(parts.next()?).ok()?).ok()?;
        let expires_ms: u64 = parts.next()?.parse().ok()?;
        let _nonce = parts.next()?;
        let fingerprint = parts.next()?.to_owned();
        if parts.next().is_some() || now_ms >= expires_ms {
            return None;
        }
        Some(Claims {
            key_id,
            expires_ms,
            fingerprint,
        })
    }

    /// The CSRF token of the session whose cookie is `token`.
    #[must_use]
    pub fn csrf(&self, token: &str) -> String {
        self.mac("csrf", token)[..32].to_owned()
    }

    /// Whether `sent` is the CSRF token of the session `token`.
    #[must_use]
    pub fn csrf_ok(&self, token: &str, sent: &str) -> bool {
        bool::from(self.csrf(token).as_bytes().ct_eq(sent.as_bytes()))
    }

    /// The `Set-Cookie` value for `token`, lasting `max_age_s`; `Secure` when the
    /// console is served over TLS.
    #[must_use]
    pub fn cookie(token: &str, max_age_s: u64, secure: bool) -> String {
        format!(
            "{COOKIE}={token}; Path={COOKIE_PATH}; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{}",
            if secure { "; Secure" } else { "" }
        )
    }
}

/// The session cookie's value among `headers`' `Cookie` headers.
#[must_use]
pub fn cookie_of(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions::new(b"cluster secret", Duration::from_hours(1))
    }

    #[test]
    fn a_cookie_names_its_key_until_it_expires() {
        let s = sessions();
        let (token, expires) = s.issue("OEDKEY", "secret", 1000);
        assert_eq!(expires, 1000 + 3_600_000);
        let c = s.check(&token, 2000).expect("valid");
        assert_eq!(c.key_id, "OEDKEY");
        assert_eq!(c.fingerprint, s.fingerprint("secret"));
        assert_ne!(c.fingerprint, s.fingerprint("rotated"));
        assert!(s.check(&token, expires).is_none());
        assert!(!token.contains("secret"));
    }

    #[test]
    fn an_altered_or_foreign_cookie_is_refused() {
        let s = sessions();
        let (token, expires) = s.issue("OEDKEY", "secret", 1000);
        let other = hex::encode("ROOT");
        let (_, rest) = token.split_once('.').expect("dots");
        assert!(s.check(&format!("{other}.{rest}"), 2000).is_none());
        let longer = token.replacen(&format!(".{expires}."), ".99999999999.", 1);
        assert_ne!(longer, token);
        assert!(s.check(&longer, 2000).is_none());
        let foreign = Sessions::new(b"another cluster", Duration::from_hours(1));
        assert!(foreign.check(&token, 2000).is_none());
        assert!(s.check("", 2000).is_none());
        assert!(s.check("a.b.c.d.e.f", 2000).is_none());
    }

    #[test]
    fn the_csrf_token_is_the_sessions_own() {
        let s = sessions();
        let (a, _) = s.issue("A", "x", 1);
        let (b, _) = s.issue("A", "x", 1);
        assert!(s.csrf_ok(&a, &s.csrf(&a)));
        assert!(!s.csrf_ok(&a, &s.csrf(&b)));
        assert!(!s.csrf_ok(&a, ""));
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_under_tls() {
        let c = Sessions::cookie("t", 60, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(!Sessions::cookie("t", 60, false).contains("Secure"));
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; oed_console=tok".parse().expect("value"),
        );
        assert_eq!(cookie_of(&h).as_deref(), Some("tok"));
    }
}
