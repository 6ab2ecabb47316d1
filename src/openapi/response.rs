//! An API's answer as the tool's outcome: a 2xx JSON body is the value (a
//! non-JSON body its text), 204 a success with no value; any other status
//! a tool failure carrying the status and a bounded excerpt of the body
//! (the credentials the call carried scrubbed from it first),
//! `can_retry` for 429, 502, 503 and 504, and `Retry-After` as
//! `retry_after_ms`. A redirect is such a failure too: it is never
//! followed.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};

use super::tools::is_json;
use crate::scrub;
use crate::wire::{RawJson, UpstreamResult};

/// The most of an error body passed on (characters).
const EXCERPT: usize = 1000;

/// The tool's outcome for one answer. `what` names the call for the
/// developer message (`upstream library: GET /books/{id}`); `sent` are the
/// credentials the request carried, which an excerpt never shows.
pub(crate) fn outcome(
    what: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    sent: &[&str],
) -> UpstreamResult {
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if status.is_success() {
        return UpstreamResult {
            duration: None,
            success: true,
            value: Some(value(status, content_type, body)),
            error: None,
        };
    }
    let reason = status.canonical_reason().map(|r| format!(" {r}")).unwrap_or_default();
    let excerpt = scrub::excerpt(body, sent, EXCERPT).trim().to_owned();
    let mut message = format!("The API answered HTTP {}{reason}", status.as_u16());
    if status.is_redirection() {
        message.push_str(" (redirects are not followed)");
    }
    let mut error = Map::new();
    error.insert("message".into(), Value::String(message));
    let detail = if excerpt.is_empty() {
        format!("{what} answered HTTP {}", status.as_u16())
    } else {
        format!("{what} answered HTTP {}: {excerpt}", status.as_u16())
    };
    error.insert("developer_message".into(), Value::String(detail));
    if !excerpt.is_empty() {
        // What the API said is often what the model needs to fix its call
        // (a 422's detail): it is shown to the model, not only logged.
        error.insert("additional_prompt_content".into(), Value::String(excerpt));
    }
    if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
        error.insert("can_retry".into(), Value::Bool(true));
        if let Some(wait) = retry_after(headers, SystemTime::now()) {
            error.insert("retry_after_ms".into(), Value::from(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)));
        }
    }
    UpstreamResult { duration: None, success: false, value: None, error: Some(Value::Object(error)) }
}

/// A successful answer's value: its JSON, its text, or `null` for none.
fn value(status: StatusCode, content_type: &str, body: &[u8]) -> RawJson {
    if status == StatusCode::NO_CONTENT || body.is_empty() {
        return RawJson::null();
    }
    // JSON when it says so, or says nothing and parses.
    if is_json(content_type) || content_type.is_empty() {
        if let Ok(json) = crate::wire::from_json::<RawJson>(body) {
            return json;
        }
    }
    match std::str::from_utf8(body) {
        Ok(text) => RawJson::from_value(&Value::String(text.to_owned())),
        // Bytes that are not text: as base64, with their type.
        Err(_) => {
            let mut value = Map::new();
            value.insert("content_type".into(), Value::String(content_type.to_owned()));
            value.insert("base64".into(), Value::String(base64::engine::general_purpose::STANDARD.encode(body)));
            RawJson::from_value(&Value::Object(value))
        }
    }
}

/// `Retry-After` as a wait: seconds, or an HTTP-date after `now`. At most
/// a day (a larger value is a misconfigured API, not a plan).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match text.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(text).ok()?.duration_since(now).unwrap_or(Duration::ZERO),
    };
    Some(wait.min(Duration::from_secs(86_400)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).expect("value"));
        }
        map
    }

    #[test]
    fn successes_are_values() {
        let json = headers(&[("content-type", "application/json")]);
        let r = outcome("x", StatusCode::OK, &json, br#"{"id": 98765432109876543210}"#, &[]);
        assert!(r.success);
        assert_eq!(r.value.expect("value").get(), r#"{"id": 98765432109876543210}"#, "passed through as written");
        let r = outcome("x", StatusCode::NO_CONTENT, &HeaderMap::new(), b"", &[]);
        assert!(r.success && r.value.expect("null").get() == "null");
        let text = headers(&[("content-type", "text/plain; charset=utf-8")]);
        let r = outcome("x", StatusCode::OK, &text, b"12", &[]);
        assert_eq!(r.value.expect("text").get(), "\"12\"", "text stays text");
        let r = outcome("x", StatusCode::OK, &json, b"not json", &[]);
        assert_eq!(r.value.expect("text").get(), "\"not json\"");
        let r = outcome("x", StatusCode::OK, &headers(&[("content-type", "image/png")]), b"\x89PNG\xff", &[]);
        assert_eq!(r.value.expect("bytes").to_value()["base64"], "iVBOR/8=");
    }

    #[test]
    fn failures_carry_status_excerpt_and_retry() {
        let r = outcome(
            "upstream lib: GET /b/{id}",
            StatusCode::NOT_FOUND,
            &HeaderMap::new(),
            b"{\"detail\":\"nope\"}",
            &[],
        );
        assert!(!r.success);
        let e = r.error.expect("error");
        assert_eq!(e["message"], "The API answered HTTP 404 Not Found");
        assert!(e["developer_message"].as_str().expect("dev").contains("GET /b/{id} answered HTTP 404: {\"detail\""));
        assert!(e.get("can_retry").is_none());
        let r = outcome("x", StatusCode::TOO_MANY_REQUESTS, &headers(&[("retry-after", "7")]), b"", &[]);
        let e = r.error.expect("error");
        assert_eq!((e["can_retry"].clone(), e["retry_after_ms"].clone()), (Value::Bool(true), Value::from(7000)));
        let r = outcome("x", StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new(), b"", &[]);
        assert_eq!(r.error.expect("e")["can_retry"], true);
        let r = outcome("x", StatusCode::FOUND, &headers(&[("location", "https://elsewhere/")]), b"", &[]);
        assert!(r.error.expect("e")["message"].as_str().expect("m").contains("not followed"));
        let long = "x".repeat(10_000);
        let r = outcome("x", StatusCode::INTERNAL_SERVER_ERROR, &HeaderMap::new(), long.as_bytes(), &[]);
        assert!(
            r.error.expect("e")["additional_prompt_content"].as_str().expect("excerpt").chars().count() <= EXCERPT + 1
        );
    }

    #[test]
    fn a_credential_echoed_in_an_error_is_scrubbed_before_the_cut() {
        // The key straddles the cut at EXCERPT characters, JSON-escaped.
        let body = format!("{}{}", "x".repeat(EXCERPT - 8), r#"key=hdr\/key-5f2a9c71"#);
        let r =
            outcome("x", StatusCode::INTERNAL_SERVER_ERROR, &HeaderMap::new(), body.as_bytes(), &["hdr/key-5f2a9c71"]);
        let e = r.error.expect("e");
        for field in ["developer_message", "additional_prompt_content"] {
            let text = e[field].as_str().expect("text");
            assert!(text.ends_with("key=[red…"), "{field}: {text}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(retry_after(&headers(&[("retry-after", &date)]), now), Some(Duration::from_secs(30)));
        assert_eq!(retry_after(&headers(&[("retry-after", "120")]), now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "99999999")]), now), Some(Duration::from_secs(86_400)));
    }
}
