//! The operator console's assets, built into the binary and served by the
//! admin listener at `/` (`admin.rs`): one HTML page, its script, its
//! style sheet and its icon, nothing from another origin. Every response carries a
//! Content-Security-Policy that allows this origin's script and style only
//! (no inline script, no `eval`), and fetches to this origin only.

/// The console's Content-Security-Policy.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                              img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A console asset: its content type and text.
pub(crate) fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" | "/index.html" => Some(("text/html; charset=utf-8", include_str!("console/index.html"))),
        "/console/app.js" => Some(("text/javascript; charset=utf-8", include_str!("console/app.js"))),
        "/console/app.css" => Some(("text/css; charset=utf-8", include_str!("console/app.css"))),
        // Browsers ask for an icon; without one each page logs a 404.
        "/console/icon.svg" | "/favicon.ico" => Some(("image/svg+xml", include_str!("console/icon.svg"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_comes_from_another_origin() {
        for path in ["/", "/console/app.js", "/console/app.css", "/console/icon.svg"] {
            let (_, text) = asset(path).expect("an asset");
            // An SVG's namespace is a name, not something fetched.
            let text = text.replace(r#"xmlns="http://www.w3.org/2000/svg""#, "");
            for foreign in ["http://", "https://", "//cdn", "eval("] {
                assert!(!text.contains(foreign), "{path} mentions {foreign}");
            }
        }
        assert!(!CSP.contains("unsafe"));
    }
}
