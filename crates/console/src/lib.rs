//! `oed-console`: the web console every drive serves under `/_oed/console/` on its S3
//! address (`docs/console.md`). The pages are three embedded files ([`assets`]); they
//! read JSON from this crate and reach S3 through it:
//!
//! - [`session`]: logging in with an access key and its secret gives a signed session
//!   cookie that any drive takes; requests that change something carry a CSRF token too.
//! - [`overview`]: the cluster's drives, each from its own answer to the peer API's
//!   `admin/console` ([`drive`]), and a drive's last hour (`admin/history`).
//! - [`proxy`]: a page's S3 requests, signed with the session's key and served by the
//!   drive's own S3 service, so a key sees in the console what it may see in S3.
//!
//! Cluster pages are for the bootstrap key, which administers the cluster; every key
//! sees its buckets.

pub mod assets;
pub mod drive;
pub mod overview;
pub mod proxy;
pub mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use s3s::auth::S3Auth;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use oed_cluster::Cluster;
use oed_s3::KeyAuth;

pub use drive::{DriveView, Probe, peer_routes};
use session::{CSRF_HEADER, Sessions, cookie_of};

/// Where the console is served.
pub const ROOT: &str = "/_oed/console/";

/// How long an overview is shown again to pages that ask for it.
pub const OVERVIEW_FRESH: Duration = Duration::from_secs(1);

/// The Content-Security-Policy of every answer: the page's own script and style only,
/// requests to its own origin only, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// [`CSP`] with the page's script and style sheet named exactly, at `origin`
/// (`http://host:port`): no other file of the origin (an object S3 serves there) runs
/// as script or style. [`CSP`] when the `Host` is not a plain host and port.
#[must_use]
pub fn csp_for(secure: bool, host: Option<&str>) -> String {
    let plain = |h: &str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
    };
    match host.filter(|h| plain(h)) {
        Some(h) => {
            let origin = format!("{}://{h}", if secure { "https" } else { "http" });
            CSP.replace(
                "script-src 'self'",
                &format!("script-src {origin}/_oed/console/app.js"),
            )
            .replace(
                "style-src 'self'",
                &format!("style-src {origin}/_oed/console/app.css"),
            )
        }
        None => CSP.to_owned(),
    }
}

/// The policy of the S3 answers the console passes on: nothing in them runs, and a
/// document opened from one belongs to no origin.
pub const CSP_SANDBOXED: &str = "default-src 'none'; frame-ancestors 'none'; sandbox";

/// One drive's console.
pub struct Console {
    /// The last overview made, as JSON, and when: pages asking within
    /// [`OVERVIEW_FRESH`] of it get it again, and pages asking while one is being made
    /// wait for it, so the drives are asked once however many pages are open.
    overview: tokio::sync::Mutex<Option<(std::time::Instant, Bytes)>>,
    cluster: Arc<Cluster>,
    probe: Arc<Probe>,
    auth: KeyAuth,
    sessions: Sessions,
    s3: s3s::service::S3Service,
    region: String,
    secure: bool,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("secure", &self.secure)
            .finish_non_exhaustive()
    }
}

/// What a console is made of.
pub struct Parts {
    /// The drive's cluster.
    pub cluster: Arc<Cluster>,
    /// The drive's own figures.
    pub probe: Arc<Probe>,
    /// The keys and their secrets (the S3 service's).
    pub auth: KeyAuth,
    /// The drive's S3 service.
    pub s3: s3s::service::S3Service,
    /// The cluster secret, from which the sessions' key is derived.
    pub cluster_secret: Vec<u8>,
    /// How long a session lasts.
    pub session: Duration,
    /// Whether the listener speaks TLS (cookies are then `Secure`).
    pub secure: bool,
    /// The S3 region requests are signed for.
    pub region: String,
}

impl Console {
    /// The console of `parts`.
    #[must_use]
    pub fn new(parts: Parts) -> Arc<Self> {
        Arc::new(Self {
            overview: tokio::sync::Mutex::new(None),
            sessions: Sessions::new(&parts.cluster_secret, parts.session),
            cluster: parts.cluster,
            probe: parts.probe,
            auth: parts.auth,
            s3: parts.s3,
            region: parts.region,
            secure: parts.secure,
        })
    }

    /// The session `headers` carry, checked: this cluster made its cookie, it has not
    /// expired, its key still exists with the same secret.
    async fn active(&self, headers: &HeaderMap) -> Result<Active, ApiError> {
        let token = cookie_of(headers).ok_or_else(ApiError::not_logged_in)?;
        let claims = self
            .sessions
            .check(&token, oed_meter::wall_ms())
            .ok_or_else(ApiError::not_logged_in)?;
        let secret = self
            .auth
            .get_secret_key(&claims.key_id)
            .await
            .map_err(|_| ApiError::not_logged_in())?;
        let secret = secret.expose().to_owned();
        if self.sessions.fingerprint(&secret) != claims.fingerprint {
            return Err(ApiError::not_logged_in());
        }
        Ok(Active {
            admin: self.auth.is_root(&claims.key_id),
            csrf: self.sessions.csrf(&token),
            key_id: claims.key_id,
            expires_ms: claims.expires_ms,
            secret,
            token,
        })
    }

    /// [`Console::active`], and for a request that changes something, its CSRF token
    /// and that it comes from a page of this origin.
    async fn allowed(&self, method: &Method, headers: &HeaderMap) -> Result<Active, ApiError> {
        let active = self.active(headers).await?;
        if !safe(method) {
            same_origin(headers)?;
            let sent = headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !self.sessions.csrf_ok(&active.token, sent) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "InvalidCsrfToken",
                    "this request must come from a page of the console (its x-oed-csrf header is missing or wrong)",
                ));
            }
        }
        Ok(active)
    }
}

/// A checked session.
pub struct Active {
    /// The access key id.
    pub key_id: String,
    /// Its secret, to sign the session's S3 requests with.
    secret: String,
    /// Whether the key administers the cluster.
    pub admin: bool,
    /// The session's CSRF token.
    csrf: String,
    /// When it ends.
    expires_ms: u64,
    token: String,
}

/// An error of the console's JSON API: `{"code", "message"}` at its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl std::fmt::Debug for Active {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Active")
            .field("key_id", &self.key_id)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn not_logged_in() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "NotLoggedIn",
            "log in: there is no session, or it expired, or its key was deleted or rotated",
        )
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    fn admin_only() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "the cluster's pages are for the key that administers the cluster",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body<'a> {
            code: &'a str,
            message: &'a str,
        }
        (
            self.status,
            Json(Body {
                code: self.code,
                message: &self.message,
            }),
        )
            .into_response()
    }
}

fn safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
}

/// Refuses a request a browser marks as sent from another site, or whose `Origin` is
/// not the address it was sent to.
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "CrossSiteRequest",
            "a request from another site may not change anything here",
        )
    };
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return Err(refused());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, h)| h.as_bytes());
        if host.is_none() || origin_host != host {
            return Err(refused());
        }
    }
    Ok(())
}

/// What a login or `GET api/session` answers.
#[derive(Debug, Serialize)]
struct SessionAnswer {
    access_key_id: String,
    admin: bool,
    csrf: String,
    expires_ms: u64,
}

#[derive(Deserialize)]
struct Login {
    access_key_id: String,
    secret_access_key: String,
}

/// The console's routes, under [`ROOT`].
pub fn router<S: Clone + Send + Sync + 'static>(console: Arc<Console>) -> Router<S> {
    Router::new()
        .route(
            "/_oed/console",
            get(|| async { (StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, ROOT)]) }),
        )
        .route(ROOT, get(|| async { assets::answer(assets::INDEX) }))
        .route(
            "/_oed/console/app.js",
            get(|| async { assets::answer(assets::JS) }),
        )
        .route(
            "/_oed/console/app.css",
            get(|| async { assets::answer(assets::CSS) }),
        )
        .route("/_oed/console/api/login", post(login))
        .route("/_oed/console/api/logout", post(logout))
        .route("/_oed/console/api/session", get(session))
        .route("/_oed/console/api/overview", get(overview))
        .route("/_oed/console/api/drives/{id}/history", get(history))
        .route("/_oed/console/api/s3", any(s3))
        .route("/_oed/console/api/s3/", any(s3))
        .route("/_oed/console/api/s3/{*path}", any(s3))
        .route("/_oed/console/{*rest}", any(not_found))
        .layer(middleware::from_fn_with_state(console.clone(), protect))
        .with_state(console)
}

/// The console's routes when it is off (`console = false`): every path under it is 404.
pub fn off<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let off = || async {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "ConsoleOff",
            "the console is off on this drive (console = false)",
        )
    };
    Router::new()
        .route("/_oed/console", any(off))
        .route("/_oed/console/", any(off))
        .route("/_oed/console/{*rest}", any(off))
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        "no such page of the console",
    )
}

/// Every answer of the console: its Content-Security-Policy, never sniffed, framed or
/// sent with a referrer; the API's answers never cached, and an object S3 answered
/// with never run as a page of the console's origin (`sandbox`). Each request is named
/// for the request metrics (an S3 one by the S3 layer).
async fn protect(State(c): State<Arc<Console>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let rest = path.strip_prefix(ROOT).unwrap_or("");
    if let Some(name) = req.extensions().get::<oed_s3::OpName>() {
        match rest {
            "" => name.set("ConsolePage"),
            "app.js" | "app.css" => name.set("ConsoleAsset"),
            "api/login" => name.set("ConsoleLogin"),
            "api/logout" => name.set("ConsoleLogout"),
            "api/session" => name.set("ConsoleSession"),
            "api/overview" => name.set("ConsoleOverview"),
            r if r.starts_with("api/drives/") => name.set("ConsoleHistory"),
            _ => {}
        }
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    let csp = if rest.starts_with("api/s3") {
        HeaderValue::from_static(CSP_SANDBOXED)
    } else {
        HeaderValue::try_from(csp_for(c.secure, host.as_deref()))
            .unwrap_or(HeaderValue::from_static(CSP))
    };
    h.insert(header::CONTENT_SECURITY_POLICY, csp);
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if rest.starts_with("api/") || !h.contains_key(header::CACHE_CONTROL) {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-store"),
        );
    }
    resp
}

fn answer_session(active: &Active) -> SessionAnswer {
    SessionAnswer {
        access_key_id: active.key_id.clone(),
        admin: active.admin,
        csrf: active.csrf.clone(),
        expires_ms: active.expires_ms,
    }
}

async fn login(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !json {
        return Err(ApiError::bad_request(
            "the login is sent as Content-Type: application/json",
        ));
    }
    let login: Login = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the login is JSON {{\"access_key_id\", \"secret_access_key\"}}: {e}"
        ))
    })?;
    let wrong = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "the access key id or the secret is wrong",
        )
    };
    let secret = c
        .auth
        .get_secret_key(&login.access_key_id)
        .await
        .map_err(|_| wrong())?;
    if !bool::from(
        secret
            .expose()
            .as_bytes()
            .ct_eq(login.secret_access_key.as_bytes()),
    ) {
        tracing::info!(key = %login.access_key_id, "console login refused: wrong secret");
        return Err(wrong());
    }
    let (token, expires_ms) =
        c.sessions
            .issue(&login.access_key_id, secret.expose(), oed_meter::wall_ms());
    let cookie = Sessions::cookie(&token, c.sessions.lifetime().as_secs(), c.secure);
    let mut resp = Json(SessionAnswer {
        admin: c.auth.is_root(&login.access_key_id),
        csrf: c.sessions.csrf(&token),
        access_key_id: login.access_key_id,
        expires_ms,
    })
    .into_response();
    if let Ok(v) = HeaderValue::try_from(cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

async fn logout(
    State(c): State<Arc<Console>>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    c.allowed(&method, &headers).await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = HeaderValue::try_from(Sessions::cookie("", 0, c.secure)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(resp)
}

async fn session(
    State(c): State<Arc<Console>>,
    headers: HeaderMap,
) -> Result<Json<SessionAnswer>, ApiError> {
    let active = c.active(&headers).await?;
    Ok(Json(answer_session(&active)))
}

async fn overview(State(c): State<Arc<Console>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let active = c.active(&headers).await?;
    if !active.admin {
        return Err(ApiError::admin_only());
    }
    let mut last = c.overview.lock().await;
    let json = match &*last {
        Some((at, json)) if at.elapsed() < OVERVIEW_FRESH => json.clone(),
        _ => {
            let made = overview::gather(&c.cluster, &c.probe).await;
            let json = Bytes::from(serde_json::to_vec(&made).unwrap_or_default());
            *last = Some((std::time::Instant::now(), json.clone()));
            json
        }
    };
    drop(last);
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

async fn history(
    State(c): State<Arc<Console>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<drive::HistoryView>, ApiError> {
    let active = c.active(&headers).await?;
    if !active.admin {
        return Err(ApiError::admin_only());
    }
    match overview::history(&c.cluster, &c.probe, &id).await {
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NoSuchDrive",
            format!("the cluster map has no drive {id:?}"),
        )),
        Some(Ok(h)) => Ok(Json(h)),
        Some(Err(e)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "DriveUnavailable",
            format!("drive {id:?} did not answer: {e}"),
        )),
    }
}

async fn s3(State(c): State<Arc<Console>>, req: Request) -> Response {
    match c.allowed(req.method(), req.headers()).await {
        Ok(active) => proxy::forward(&c, &active, req).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(*n, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn the_policy_names_the_pages_own_files() {
        let csp = csp_for(false, Some("127.0.0.1:9400"));
        assert!(csp.contains("script-src http://127.0.0.1:9400/_oed/console/app.js;"));
        assert!(csp.contains("style-src http://127.0.0.1:9400/_oed/console/app.css;"));
        assert!(csp_for(true, Some("[::1]:9400")).contains("script-src https://[::1]:9400/"));
        assert_eq!(csp_for(false, Some("a; script-src *")), CSP);
        assert_eq!(csp_for(false, None), CSP);
    }

    #[test]
    fn only_requests_from_the_consoles_own_origin_change_anything() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:9400")])).is_ok());
        assert!(
            same_origin(&headers(&[
                ("host", "127.0.0.1:9400"),
                ("origin", "http://127.0.0.1:9400"),
                ("sec-fetch-site", "same-origin"),
            ]))
            .is_ok()
        );
        assert!(
            same_origin(&headers(&[
                ("host", "127.0.0.1:9400"),
                ("origin", "http://evil.example"),
            ]))
            .is_err()
        );
        assert!(
            same_origin(&headers(&[
                ("host", "127.0.0.1:9400"),
                ("sec-fetch-site", "cross-site"),
            ]))
            .is_err()
        );
        assert!(same_origin(&headers(&[("host", "127.0.0.1:9400"), ("origin", "null"),])).is_err());
    }
}
