//! Text to search terms: words split where the case changes and at
//! punctuation, common English words dropped, Snowball English stems, two-word
//! verbs joined, and the words people use for the same thing.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Longer words are not indexed or searched (base64, hashes, URLs).
const MAX_WORD_BYTES: usize = 64;
/// A query's distinct search terms, in the order they first appear.
pub(super) fn query_terms(text: &str) -> Vec<String> {
    let mut all = Vec::new();
    push_terms(joined_phrases(words(text)), &mut all);
    let mut seen = Vec::with_capacity(all.len());
    for term in all {
        if !seen.contains(&term) {
            seen.push(term);
        }
    }
    seen
}

/// Two-word verbs that mean something neither word does alone (`set up`
/// a meeting is not its settings), as one word for [`RELATED`].
const PHRASES: &[(&str, &str, &str)] = &[("set", "up", "setup"), ("sign", "up", "signup"), ("look", "up", "lookup")];

/// `words` with each pair of [`PHRASES`] as one word.
fn joined_phrases(words: Vec<String>) -> Vec<String> {
    let mut joined = Vec::with_capacity(words.len());
    let mut words = words.into_iter().peekable();
    while let Some(word) = words.next() {
        let phrase =
            PHRASES.iter().find(|(first, second, _)| word == *first && words.peek().is_some_and(|w| w == second));
        match phrase {
            Some((_, _, one)) => {
                words.next();
                joined.push((*one).to_owned());
            }
            None => joined.push(word),
        }
    }
    joined
}

/// A query's terms with their weights and the query word each stands for:
/// its own words at 1, and the words people use for the same thing
/// ([`RELATED`]) at [`RELATED_WEIGHT`].
pub(super) fn weighted_terms(text: &str) -> Vec<(String, f32, usize)> {
    let own = query_terms(text);
    let related = related_terms();
    let mut weighted: Vec<(String, f32, usize)> =
        own.iter().enumerate().map(|(word, term)| (term.clone(), 1.0, word)).collect();
    for (word, term) in own.iter().enumerate() {
        for other in related.get(term.as_str()).into_iter().flatten() {
            if !weighted.iter().any(|(seen, _, _)| seen == other) {
                weighted.push((other.clone(), RELATED_WEIGHT, word));
            }
        }
    }
    weighted
}

/// How much a related word counts against a word of the query itself.
const RELATED_WEIGHT: f32 = 0.4;

/// Each word of [`RELATED`], stemmed, with the other words of its groups.
fn related_terms() -> &'static HashMap<String, Vec<String>> {
    static RELATED_TERMS: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    RELATED_TERMS.get_or_init(|| {
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        for group in RELATED {
            let mut stems = Vec::new();
            for word in group.split_whitespace() {
                terms(word, &mut stems);
            }
            for stem in &stems {
                let others = map.entry(stem.clone()).or_default();
                for other in &stems {
                    if other != stem && !others.contains(other) {
                        others.push(other.clone());
                    }
                }
            }
        }
        map
    })
}

/// Words people use for the same thing when they ask for a tool, and the
/// words tool descriptions use for it: a query word finds tools described
/// with the others of its group, counting [`RELATED_WEIGHT`] as much.
/// General vocabulary of messaging, scheduling, files, payments and the
/// like, not of any one catalog (benches/README.md, "Tool search", has the
/// recall with and without it, on queries written before it).
const RELATED: &[&str] = &[
    "text sms texting mms",
    "email mail inbox gmail",
    "dm direct private",
    "bug issue defect ticket crash",
    "meeting event appointment",
    "schedule book calendar",
    "remind reminder task todo",
    "bill invoice",
    "charge payment pay",
    "refund reimburse",
    "note notes page wiki",
    "document doc file pdf",
    "spreadsheet sheet excel",
    "row rows record",
    "folder directory",
    "tweet post twitter",
    "song track music tune",
    "play playback listen",
    "skip next",
    "video zoom conference",
    "recording recorded",
    "flight fly plane airline",
    "order purchase",
    "shipped shipping fulfill delivery tracking",
    "stock inventory quantity available units",
    "discount coupon promo",
    "contact person people",
    "lead prospect",
    "deal opportunity",
    "translate translation language",
    "language english spanish french german italian portuguese dutch russian chinese japanese korean arabic hindi",
    "weather forecast temperature",
    "rain precipitation umbrella",
    "hot cold warm temperature",
    "storm warning alert severe",
    "coordinates latitude longitude geocode",
    "near nearby place places",
    "directions route travel commute",
    "repo repository",
    "pr pull",
    "close closed resolve fix fixed",
    "done complete completed finish",
    "find search look lookup",
    "share permission access",
    "delete remove trash",
    "create new add make open setup signup",
    "list show",
    "update change edit modify move reschedule",
    "free available availability busy",
    "reply respond answer",
    "balance funds money",
    "subscription membership recurring",
    "customer client",
    "channel room",
    "log record",
    "status delivered delivery",
];

/// The search terms of `text`: its [`words`] without common English words
/// and single letters, stemmed.
pub fn terms(text: &str, out: &mut Vec<String>) {
    push_terms(words(text), out);
}

/// The search terms of these words (see [`terms`]).
fn push_terms(words: Vec<String>, out: &mut Vec<String>) {
    static STEMMER: OnceLock<rust_stemmers::Stemmer> = OnceLock::new();
    let stemmer = STEMMER.get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    for word in words {
        let single_letter = word.chars().count() == 1 && word.chars().all(char::is_alphabetic);
        if single_letter || word.len() > MAX_WORD_BYTES || STOP_WORDS.binary_search(&word.as_str()).is_ok() {
            continue;
        }
        out.push(stemmer.stem(&word).into_owned());
    }
}

/// Words that say nothing about which tool is meant, sorted for
/// `binary_search`.
const STOP_WORDS: [&str; 71] = [
    "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "him", "his", "how", "if", "im",
    "in", "into", "is", "it", "its", "just", "me", "my", "of", "on", "or", "our", "please", "she", "should", "so",
    "some", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "us", "was", "we",
    "were", "what", "which", "who", "will", "with", "would", "you",
];

/// Splits text into lower-case words: runs of letters and digits, cut
/// where a lower-case letter meets an upper-case one (`SendSms`), before
/// the last capital of a run of capitals followed by a lower-case letter
/// (`HTTPServer`: "http", "server"), between letters and digits (`Tool007`),
/// and at anything else (`snake_case`, `kebab-case`, spaces, punctuation).
pub fn words(text: &str) -> Vec<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Upper,
        Lower,
        Digit,
        Other,
    }
    let kind = |c: char| {
        if c.is_uppercase() {
            Kind::Upper
        } else if c.is_alphabetic() {
            Kind::Lower
        } else if c.is_numeric() {
            Kind::Digit
        } else {
            Kind::Other
        }
    };
    let chars: Vec<(char, Kind)> = text.chars().map(|c| (c, kind(c))).collect();
    let mut out = Vec::new();
    let mut current = String::new();
    for (i, &(c, k)) in chars.iter().enumerate() {
        let previous = i.checked_sub(1).map(|p| chars[p].1);
        let next = chars.get(i + 1).map(|n| n.1);
        let boundary = match (previous, k) {
            (_, Kind::Other) => true,
            (Some(Kind::Lower), Kind::Upper) => true,
            (Some(Kind::Upper), Kind::Upper) => next == Some(Kind::Lower),
            (Some(Kind::Digit), Kind::Upper | Kind::Lower) | (Some(Kind::Upper | Kind::Lower), Kind::Digit) => true,
            _ => false,
        };
        if boundary && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        if k != Kind::Other {
            current.extend(c.to_lowercase());
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_word_verbs_are_one_word() {
        assert_eq!(joined_phrases(words("Set up a Zoom call")), ["setup", "a", "zoom", "call"]);
        assert!(query_terms("set up a call").iter().all(|t| t != "set"), "not the word of `settings`");
        let weighted = weighted_terms("set up a call");
        assert!(weighted.iter().any(|(term, weight, _)| term == "creat" && *weight == RELATED_WEIGHT), "{weighted:?}");
        assert_eq!(joined_phrases(words("set the volume up")), ["set", "the", "volume", "up"]);
        assert_eq!(query_terms("SendSms"), ["send", "sms"], "words still split where the case changes");
    }

    #[test]
    fn names_split_into_words() {
        assert_eq!(words("SendSms"), ["send", "sms"]);
        assert_eq!(words("send_sms"), ["send", "sms"]);
        assert_eq!(words("get-weather"), ["get", "weather"]);
        assert_eq!(words("GoogleCalendar"), ["google", "calendar"]);
        assert_eq!(words("HTTPServer"), ["http", "server"]);
        assert_eq!(words("getHTTPResponseCode"), ["get", "http", "response", "code"]);
        assert_eq!(words("Tool007"), ["tool", "007"]);
        assert_eq!(words("Kit03.Tool117@1.0.0"), ["kit", "03", "tool", "117", "1", "0", "0"]);
        assert_eq!(words("SMS"), ["sms"]);
        assert_eq!(words("  Text my landlord: I'm late! "), ["text", "my", "landlord", "i", "m", "late"]);
        assert_eq!(words("Straße ÜBER naïve"), ["straße", "über", "naïve"]);
        assert!(words("").is_empty() && words("_-. !").is_empty());
    }

    #[test]
    fn terms_drop_common_words_and_stem() {
        let mut out = Vec::new();
        terms("Text my landlord that I'm texting about the late messages", &mut out);
        assert_eq!(out, ["text", "landlord", "text", "late", "messag"]);
        let mut out = Vec::new();
        terms("SendSms send_sms", &mut out);
        assert_eq!(out, ["send", "sms", "send", "sms"]);
    }

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]), "STOP_WORDS must be sorted and distinct");
    }
}
