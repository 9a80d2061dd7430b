//! The console's pages: one HTML file, its script and its style sheet, embedded in the
//! binary (`crates/console/assets/`). No build step and nothing fetched from elsewhere;
//! together they stay under [`BUDGET`] bytes before compression, so under it compressed.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// An embedded file: its bytes and content type.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    /// Its content.
    pub body: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
}

/// The page.
pub const INDEX: Asset = Asset {
    body: include_str!("../assets/index.html"),
    content_type: "text/html; charset=utf-8",
};

/// Its script.
pub const JS: Asset = Asset {
    body: include_str!("../assets/app.js"),
    content_type: "text/javascript; charset=utf-8",
};

/// Its style sheet.
pub const CSS: Asset = Asset {
    body: include_str!("../assets/app.css"),
    content_type: "text/css; charset=utf-8",
};

/// The most the three may weigh, bytes (the budget is 150 KB compressed).
pub const BUDGET: usize = 150 * 1000;

/// `asset` as an answer, revalidated on every use (so an upgraded drive serves its own).
#[must_use]
pub fn answer(asset: Asset) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        asset.body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pages_fit_the_budget_and_load_nothing_from_elsewhere() {
        let all = [INDEX, JS, CSS];
        let size: usize = all.iter().map(|a| a.body.len()).sum();
        assert!(size <= BUDGET, "{size} bytes");
        for a in all {
            for outside in [
                "src=\"http",
                "href=\"http",
                "url(http",
                "url(//",
                "@import",
                "<script>",
                " onclick=",
                " style=\"",
                ".innerHTML",
                "insertAdjacentHTML",
                "document.write",
                " eval(",
            ] {
                assert!(!a.body.contains(outside), "{outside} in {}", a.content_type);
            }
        }
        assert!(INDEX.body.contains("app.js") && INDEX.body.contains("app.css"));
    }
}
