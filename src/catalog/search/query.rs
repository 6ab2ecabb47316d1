//! A search request: read from a query string or given by `/mcp`'s
//! `search_tools`, and checked (not empty, not too long, not too many
//! words, a limit and a version that make sense).

use semver::Version;

use super::text::query_terms;

/// The most results one search returns.
pub const MAX_LIMIT: usize = 100;
/// Results when the request names no limit.
pub const DEFAULT_LIMIT: usize = 10;
/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// The most distinct words a query may have after common words are dropped.
pub const MAX_QUERY_WORDS: usize = 32;
/// Why a search request was refused (a 400 on `GET /tools/search`, a tool
/// error on `/mcp`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// No `q`, or only spaces.
    #[error("the query is empty: send the words to search for in q")]
    EmptyQuery,
    /// A `q` over [`MAX_QUERY_BYTES`].
    #[error("the query is longer than {MAX_QUERY_BYTES} bytes")]
    QueryTooLong,
    /// More than [`MAX_QUERY_WORDS`] distinct words.
    #[error("the query has more than {MAX_QUERY_WORDS} distinct words")]
    TooManyWords,
    /// A `limit` that is not a whole number from 1 to [`MAX_LIMIT`].
    #[error("limit must be a whole number from 1 to {MAX_LIMIT}, not {0}")]
    BadLimit(String),
    /// A `version` that is not `x.y.z` or `x`.
    #[error("version must be x.y.z (or x, meaning x.0.0), not {0}")]
    BadVersion(String),
    /// A parameter given twice.
    #[error("{0} is given more than once")]
    Repeated(&'static str),
    /// Percent-escapes that do not decode to UTF-8 (`%FF`).
    #[error("the query string is not UTF-8 once decoded")]
    NotUtf8,
}

/// One validated search: the words, how many results, which version.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// The query as sent (validated: not empty, not too long, not too many words).
    pub text: String,
    /// How many results at most, 1 to [`MAX_LIMIT`].
    pub limit: usize,
    /// Tools at exactly this version; `None`: each at its latest.
    pub version: Option<Version>,
}

impl SearchRequest {
    /// Checks a query's text and limit (`None`: [`DEFAULT_LIMIT`]).
    pub fn new(text: &str, limit: Option<usize>, version: Option<Version>) -> Result<SearchRequest, SearchError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SearchError::EmptyQuery);
        }
        if text.len() > MAX_QUERY_BYTES {
            return Err(SearchError::QueryTooLong);
        }
        if query_terms(text).len() > MAX_QUERY_WORDS {
            return Err(SearchError::TooManyWords);
        }
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(n @ 1..=MAX_LIMIT) => n,
            Some(n) => return Err(SearchError::BadLimit(n.to_string())),
        };
        Ok(SearchRequest { text: text.to_owned(), limit, version })
    }

    /// Reads `q`, `limit` and `version` from a URL query string
    /// (`q=send+sms&limit=5`); other parameters are ignored.
    pub fn from_query_string(query: Option<&str>) -> Result<SearchRequest, SearchError> {
        // form_urlencoded decodes invalid UTF-8 to U+FFFD; such a query is refused instead.
        let decodes = |part: &str| percent_encoding::percent_decode_str(part).decode_utf8().is_ok();
        if !query.unwrap_or_default().split(['&', '=']).all(decodes) {
            return Err(SearchError::NotUtf8);
        }
        let (mut text, mut limit, mut version) = (None, None, None);
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let (slot, name) = match name.as_ref() {
                "q" => (&mut text, "q"),
                "limit" => (&mut limit, "limit"),
                "version" => (&mut version, "version"),
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return Err(SearchError::Repeated(name));
            }
        }
        let limit = match limit {
            None => None,
            Some(given) => Some(given.trim().parse::<usize>().map_err(|_| SearchError::BadLimit(quoted(&given)))?),
        };
        let version = match version {
            None => None,
            Some(given) => {
                let bare = given.trim().trim_start_matches('@');
                Some(
                    crate::resolve::parse_requested_version(bare)
                        .ok_or_else(|| SearchError::BadVersion(quoted(&given)))?,
                )
            }
        };
        SearchRequest::new(text.as_deref().unwrap_or_default(), limit, version)
    }
}

/// A client's text, quoted and cut short for an error message.
fn quoted(text: &str) -> String {
    let short: String = text.chars().take(40).collect();
    if short.len() < text.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked() {
        let ok = SearchRequest::from_query_string(Some("q=send+sms&limit=5&version=%401.0.0&other=x")).unwrap();
        assert_eq!((ok.text.as_str(), ok.limit, ok.version), ("send sms", 5, Some(Version::new(1, 0, 0))));
        assert_eq!(SearchRequest::from_query_string(Some("q=a")).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(
            SearchRequest::from_query_string(Some("q=x&version=2")).unwrap().version,
            Some(Version::new(2, 0, 0))
        );
        for (query, error) in [
            (None, SearchError::EmptyQuery),
            (Some(""), SearchError::EmptyQuery),
            (Some("q=+++"), SearchError::EmptyQuery),
            (Some("limit=3"), SearchError::EmptyQuery),
            (Some("q=a&limit=abc"), SearchError::BadLimit("\"abc\"".into())),
            (Some("q=a&limit=0"), SearchError::BadLimit("0".into())),
            (Some("q=a&limit=101"), SearchError::BadLimit("101".into())),
            (Some("q=a&limit=-1"), SearchError::BadLimit("\"-1\"".into())),
            (Some("q=a&version=latest"), SearchError::BadVersion("\"latest\"".into())),
            (Some("q=a&q=b"), SearchError::Repeated("q")),
        ] {
            assert_eq!(SearchRequest::from_query_string(query), Err(error), "{query:?}");
        }
        let long = format!("q={}", "a".repeat(MAX_QUERY_BYTES + 1));
        assert_eq!(SearchRequest::from_query_string(Some(&long)), Err(SearchError::QueryTooLong));
        let many: Vec<String> = (0..=MAX_QUERY_WORDS).map(|i| format!("word{i}x")).collect();
        let many = format!("q={}", many.join("+"));
        assert_eq!(SearchRequest::from_query_string(Some(&many)), Err(SearchError::TooManyWords));
        // Odd characters are words like any other; escapes that are not UTF-8 are refused.
        assert!(SearchRequest::from_query_string(Some("q=%00abc%F0%9F%A6%80%E2%80%AE+caf%C3%A9")).is_ok());
        assert_eq!(SearchRequest::from_query_string(Some("q=%FF%FEabc")), Err(SearchError::NotUtf8));
        assert_eq!(SearchRequest::from_query_string(Some("q=ok&x%C3=1")), Err(SearchError::NotUtf8));
        let huge_limit = SearchRequest::from_query_string(Some("q=a&limit=99999999999999999999999"));
        assert!(matches!(huge_limit, Err(SearchError::BadLimit(_))));
    }
}
