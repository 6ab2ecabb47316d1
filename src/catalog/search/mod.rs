//! Tool search: a lexical index of the catalog, built with each catalog
//! (off the hot path, on publish) and swapped with it, so a search takes no
//! lock and never waits for a rebuild.
//!
//! Ranking is BM25F over four fields of each tool version: its name split
//! into words (`SendSms`, `send_sms` and `send-sms` are all "send sms"), its
//! toolkit (split the same way), its description, and its parameters' names
//! and descriptions; a word in the name counts most. Words are lower-cased,
//! stemmed (Snowball English: "texting" finds "text") and stripped of
//! common English words. A query word also finds, at a lower weight, the
//! words people use for the same thing ([`RELATED`]), and a tool matching
//! more of the query's words beats one matching a single word strongly.
//!
//! Every statistic a score uses (how many tools there are, how many hold a
//! word, their average field lengths) is taken over the [`Scope`] searched:
//! the tools a caller may see, at the versions asked for. A caller's results
//! are therefore exactly those of a catalog holding only its tools; tools it
//! may not see change neither which tools it finds nor their order.
//!
//! Here: the index and the ranking. `query.rs` reads and checks a search
//! request; `text.rs` turns text into search terms (words, common words,
//! stems, two-word verbs, related words).
//!
//! Written here rather than on a crate: the `bm25` crate, measured on the
//! same queries (benches/README.md, "Tool search"), ranks like BM25F alone
//! and has no fields, no weighted query words and no statistics over a
//! subset chosen per search; tantivy has none of the last either.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use semver::Version;
use serde_json::Value;

use super::{Route, ToolMap};

mod query;
mod text;

pub use query::{SearchError, SearchRequest, MAX_LIMIT};
use text::{terms, weighted_terms};

/// The fields of a tool that are searched, in the order of [`WEIGHTS`].
const FIELDS: usize = 4;
const NAME: usize = 0;
const TOOLKIT: usize = 1;
const DESCRIPTION: usize = 2;
const PARAMETERS: usize = 3;

/// How much a word counts in each field: name, toolkit, description,
/// parameters. The name says what the tool does in two or three words.
const WEIGHTS: [f32; FIELDS] = [3.0, 1.5, 1.0, 1.0];
/// BM25's length normalisation per field (0: none, 1: full). Names and
/// toolkits are a few words each, so their length says little.
const LENGTH_NORMALISATION: [f32; FIELDS] = [0.3, 0.3, 0.75, 0.75];
/// BM25's term frequency saturation.
const K1: f32 = 1.2;

/// The search index of one catalog.
#[derive(Debug, Default)]
pub struct SearchIndex {
    /// One per tool version, sorted by key then version.
    docs: Vec<Doc>,
    /// Each word's id: its postings are `postings[offsets[id]..offsets[id + 1]]`.
    terms: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    offsets: Vec<u32>,
    /// The tool versions holding each word, by word id then document.
    postings: Vec<Posting>,
    /// Every tool at its latest version: the scope when no policy applies.
    latest: Arc<Scope>,
    build_time: Duration,
    heap_bytes: usize,
}

/// One tool version in the index.
#[derive(Debug)]
pub struct Doc {
    /// The route that serves it (its definition is `route.tool.definition`).
    pub route: Arc<Route>,
    /// Words in each field.
    lengths: [u16; FIELDS],
    /// Whether it is its tool's highest version.
    latest: bool,
}

impl Doc {
    /// The root catalog's `Toolkit.Name` (in a virtual server's view, the
    /// tool it stands for): what policies judge.
    pub fn root_key(&self) -> &str {
        &self.route.root().tool.key
    }

    /// Its version.
    pub fn version(&self) -> &Version {
        &self.route.tool.version
    }

    /// Whether it is its tool's highest version.
    pub fn is_latest(&self) -> bool {
        self.latest
    }
}

/// One document holding a word, and how often in each field.
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    counts: [u8; FIELDS],
}

/// The tool versions one search may rank, with the statistics BM25 takes
/// over them.
#[derive(Debug, Default, Clone)]
pub struct Scope {
    /// One bit per document of the index.
    members: Vec<u64>,
    count: u32,
    average_lengths: [f32; FIELDS],
}

impl Scope {
    /// Whether document `doc` is in the scope.
    fn contains(&self, doc: u32) -> bool {
        self.members.get(doc as usize / 64).is_some_and(|word| word & (1 << (doc % 64)) != 0)
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// One search result.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    /// The tool version found.
    pub doc: &'a Doc,
    /// Its BM25F score (higher is better). Compared by the tests; never
    /// sent to a client.
    #[cfg_attr(not(test), allow(dead_code))]
    pub score: f32,
}

/// Figures about an index, for `/status`.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct IndexStats {
    /// Tool versions indexed.
    pub documents: usize,
    /// Distinct words.
    pub terms: usize,
    /// Heap memory the index holds, in bytes (the definitions it points to
    /// belong to the catalog and are not counted).
    pub bytes: usize,
    /// How long building it took, in milliseconds.
    pub build_ms: f64,
}

impl SearchIndex {
    /// Indexes every version of every tool in `tools`.
    pub(crate) fn build(tools: &ToolMap) -> SearchIndex {
        let started = Instant::now();
        let mut keys: Vec<&String> = tools.keys().collect();
        keys.sort_unstable();
        let mut ids: HashMap<String, u32, foldhash::fast::RandomState> = HashMap::default();
        let mut by_term: Vec<Vec<Posting>> = Vec::new();
        let mut docs = Vec::new();
        let mut counts: HashMap<u32, [u8; FIELDS], foldhash::fast::RandomState> = HashMap::default();
        let mut words = Vec::new();
        for key in keys {
            let versions = &tools[key];
            for (n, route) in versions.values().enumerate() {
                let doc = docs.len() as u32;
                counts.clear();
                let mut lengths = [0u16; FIELDS];
                for (field, text) in field_texts(key, route) {
                    words.clear();
                    terms(&text, &mut words);
                    lengths[field] = lengths[field].saturating_add(words.len().min(u16::MAX as usize) as u16);
                    for word in words.drain(..) {
                        let next = ids.len() as u32;
                        let id = *ids.entry(word).or_insert(next);
                        if id == next {
                            by_term.push(Vec::new());
                        }
                        let count = &mut counts.entry(id).or_default()[field];
                        *count = count.saturating_add(1);
                    }
                }
                for (&id, &counts) in &counts {
                    by_term[id as usize].push(Posting { doc, counts });
                }
                docs.push(Doc { route: route.clone(), lengths, latest: n + 1 == versions.len() });
            }
        }
        let mut offsets = Vec::with_capacity(by_term.len() + 1);
        let mut postings = Vec::with_capacity(by_term.iter().map(Vec::len).sum());
        offsets.push(0);
        for list in by_term {
            postings.extend_from_slice(&list);
            offsets.push(postings.len() as u32);
        }
        let terms: HashMap<Box<str>, u32, foldhash::fast::RandomState> =
            ids.into_iter().map(|(word, id)| (word.into_boxed_str(), id)).collect();
        let mut index = SearchIndex { docs, terms, offsets, postings, ..SearchIndex::default() };
        index.latest = Arc::new(index.scope(|_, doc| doc.latest));
        index.heap_bytes = index.measure_heap();
        index.build_time = started.elapsed();
        index
    }

    /// The scope of every tool at its latest version.
    pub fn latest(&self) -> Arc<Scope> {
        self.latest.clone()
    }

    /// The scope of the documents `keep` accepts (given each one's number
    /// and the document).
    pub fn scope(&self, mut keep: impl FnMut(usize, &Doc) -> bool) -> Scope {
        let mut members = vec![0u64; self.docs.len().div_ceil(64)];
        let mut count = 0u32;
        let mut totals = [0f64; FIELDS];
        for (i, doc) in self.docs.iter().enumerate() {
            if keep(i, doc) {
                members[i / 64] |= 1 << (i % 64);
                count += 1;
                for (total, &length) in totals.iter_mut().zip(&doc.lengths) {
                    *total += f64::from(length);
                }
            }
        }
        let average_lengths = totals.map(|total| if count == 0 { 0.0 } else { (total / f64::from(count)) as f32 });
        Scope { members, count, average_lengths }
    }

    /// Whether document number `doc` is in `scope` (for narrowing a scope).
    pub fn in_scope(scope: &Scope, doc: usize) -> bool {
        u32::try_from(doc).is_ok_and(|doc| scope.contains(doc))
    }

    /// The best `limit` documents of `scope` for `text`, best first (ties
    /// in key order). Words of the query no tool holds are ignored.
    pub fn search(&self, scope: &Scope, text: &str, limit: usize) -> Vec<Hit<'_>> {
        if scope.is_empty() || limit == 0 {
            return Vec::new();
        }
        let mut scores = vec![0f32; self.docs.len()];
        // Which of the query's words each document matched (bit i: word i).
        let mut matched = vec![0u32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        let total = scope.count as f32;
        for (term, weight, word) in weighted_terms(text) {
            let Some(&id) = self.terms.get(term.as_str()) else { continue };
            let list = &self.postings[self.offsets[id as usize] as usize..self.offsets[id as usize + 1] as usize];
            let holding = list.iter().filter(|p| scope.contains(p.doc)).count() as f32;
            if holding == 0.0 {
                continue;
            }
            let idf = weight * (1.0 + (total - holding + 0.5) / (holding + 0.5)).ln();
            for posting in list.iter().filter(|p| scope.contains(p.doc)) {
                let lengths = &self.docs[posting.doc as usize].lengths;
                let mut frequency = 0f32;
                for field in 0..FIELDS {
                    if posting.counts[field] == 0 {
                        continue;
                    }
                    let average = scope.average_lengths[field];
                    let relative = if average > 0.0 { f32::from(lengths[field]) / average } else { 1.0 };
                    let b = LENGTH_NORMALISATION[field];
                    frequency += WEIGHTS[field] * f32::from(posting.counts[field]) / (1.0 - b + b * relative);
                }
                let score = &mut scores[posting.doc as usize];
                if *score == 0.0 {
                    touched.push(posting.doc);
                }
                *score += idf * frequency * (K1 + 1.0) / (K1 + frequency);
                matched[posting.doc as usize] |= 1 << (word % 32);
            }
        }
        // A tool that matches more of the query's words beats one that
        // matches one of them strongly.
        for &doc in &touched {
            scores[doc as usize] *= (matched[doc as usize].count_ones() as f32).sqrt();
        }
        // Best score first; equal scores in document (key) order.
        let order = |a: &u32, b: &u32| scores[*b as usize].total_cmp(&scores[*a as usize]).then(a.cmp(b));
        if touched.len() > limit {
            touched.select_nth_unstable_by(limit - 1, order);
            touched.truncate(limit);
        }
        touched.sort_unstable_by(order);
        touched.into_iter().map(|doc| Hit { doc: &self.docs[doc as usize], score: scores[doc as usize] }).collect()
    }

    /// Its size and build time.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            documents: self.docs.len(),
            terms: self.terms.len(),
            bytes: self.heap_bytes,
            build_ms: self.build_time.as_secs_f64() * 1000.0,
        }
    }

    /// The heap memory the index holds: its vectors and its word table at
    /// their capacities (each map entry's control byte included).
    fn measure_heap(&self) -> usize {
        use std::mem::size_of;
        self.docs.capacity() * size_of::<Doc>()
            + self.terms.capacity() * (size_of::<(Box<str>, u32)>() + 1)
            + self.terms.keys().map(|word| word.len()).sum::<usize>()
            + self.offsets.capacity() * size_of::<u32>()
            + self.postings.capacity() * size_of::<Posting>()
            + self.latest.members.capacity() * size_of::<u64>()
    }
}

/// The text of each field of one tool version.
fn field_texts(key: &str, route: &Route) -> [(usize, String); FIELDS] {
    let definition = &route.tool.definition;
    let toolkit = key.split_once('.').map_or(key, |(toolkit, _)| toolkit);
    let mut parameters = String::new();
    parameter_text(&definition.input_schema.to_value(), 0, &mut parameters);
    [
        (NAME, definition.name.clone()),
        (TOOLKIT, toolkit.to_owned()),
        (DESCRIPTION, definition.description.clone()),
        (PARAMETERS, parameters),
    ]
}

/// The names and descriptions of a schema's properties, two levels deep
/// (an object parameter's own fields, an array's items).
fn parameter_text(schema: &Value, depth: usize, out: &mut String) {
    if depth > 2 {
        return;
    }
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            out.push_str(name);
            out.push(' ');
            if let Some(Value::String(description)) = property.get("description") {
                out.push_str(description);
                out.push(' ');
            }
            parameter_text(property, depth + 1, out);
        }
    }
    if let Some(items) = schema.get("items") {
        parameter_text(items, depth + 1, out);
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::dialect::{normalise_catalog, DialectDefaults};
    use proptest::prelude::*;
    use serde_json::json;

    /// An index of these definitions (`(id, name, description, parameters)`).
    fn index_of(tools: &[(&str, &str, &str, Value)]) -> SearchIndex {
        let items: Vec<Value> = tools
            .iter()
            .map(|(id, name, description, parameters)| {
                let version = id.split_once('@').map_or("1.0.0", |(_, v)| v);
                json!({"id": id, "name": name, "description": description, "version": version,
                       "input_schema": {"type": "object", "properties": parameters}})
            })
            .collect();
        let body = serde_json::to_vec(&json!({"items": items})).unwrap();
        let (tools, skipped) = normalise_catalog(&body, DialectDefaults::default()).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let mut map = ToolMap::default();
        for tool in tools {
            let key = tool.key.clone();
            let version = tool.version.clone();
            map.entry(key).or_default().insert(version, Arc::new(Route::new(Arc::new(tool), Vec::new())));
        }
        SearchIndex::build(&map)
    }

    fn found(index: &SearchIndex, scope: &Scope, text: &str, limit: usize) -> Vec<String> {
        index.search(scope, text, limit).iter().map(|hit| hit.doc.route.tool.definition.id.clone()).collect()
    }

    #[test]
    fn the_name_counts_more_than_the_description() {
        let index = index_of(&[
            ("Billing.Refund@1.0.0", "Refund", "Give a customer their money back for a charge.", json!({})),
            (
                "Billing.ListCharges@1.0.0",
                "ListCharges",
                "List charges, refunds and disputes of an account.",
                json!({}),
            ),
            ("Chat.Post@1.0.0", "Post", "Post a message to a channel.", json!({})),
        ]);
        assert_eq!(found(&index, &index.latest(), "refund", 10), ["Billing.Refund@1.0.0", "Billing.ListCharges@1.0.0"]);
        assert_eq!(found(&index, &index.latest(), "refunding", 1), ["Billing.Refund@1.0.0"], "stemmed");
        assert_eq!(found(&index, &index.latest(), "list charges", 10)[0], "Billing.ListCharges@1.0.0");
        assert!(found(&index, &index.latest(), "the of and", 10).is_empty(), "only common words: nothing");
        assert!(found(&index, &index.latest(), "zebra", 10).is_empty());
    }

    #[test]
    fn parameters_and_toolkits_are_searched() {
        let index = index_of(&[
            ("Sms.Send@1.0.0", "Send", "Send a message.", json!({"phone_number": {"type": "string"}})),
            (
                "Mail.Send@1.0.0",
                "Send",
                "Send a message.",
                json!({"to": {"description": "The recipient's email address"}}),
            ),
        ]);
        assert_eq!(found(&index, &index.latest(), "phone", 10), ["Sms.Send@1.0.0"]);
        assert_eq!(found(&index, &index.latest(), "email address", 10), ["Mail.Send@1.0.0"]);
        assert_eq!(found(&index, &index.latest(), "sms", 10), ["Sms.Send@1.0.0"]);
    }

    #[test]
    fn each_tool_at_its_latest_version_unless_a_version_is_asked_for() {
        let index = index_of(&[
            ("Calc.Add@1.0.0", "Add", "Adds two numbers.", json!({})),
            ("Calc.Add@2.0.0", "Add", "Adds numbers.", json!({})),
            ("Calc.Sub@1.0.0", "Sub", "Subtracts two numbers.", json!({})),
        ]);
        assert_eq!(found(&index, &index.latest(), "add numbers", 10), ["Calc.Add@2.0.0", "Calc.Sub@1.0.0"]);
        let v1 = Version::new(1, 0, 0);
        let at_v1 = index.scope(|_, doc| *doc.version() == v1);
        assert_eq!(found(&index, &at_v1, "add numbers", 10), ["Calc.Add@1.0.0", "Calc.Sub@1.0.0"]);
        assert_eq!(found(&index, &at_v1, "add numbers", 1), ["Calc.Add@1.0.0"], "limit");
        assert_eq!(index.stats().documents, 3);
    }

    /// Tools (toolkit, name, description words), which are visible, and a query's words.
    type Case = (Vec<(String, String, Vec<usize>)>, Vec<bool>, Vec<usize>);

    /// Catalogs of a few words, each tool visible or not.
    fn catalog_and_visibility() -> impl Strategy<Value = Case> {
        let tool = (0usize..4, 0usize..6, proptest::collection::vec(0usize..VOCABULARY.len(), 0..8));
        (
            proptest::collection::vec(tool, 1..12),
            proptest::collection::vec(any::<bool>(), 12),
            proptest::collection::vec(0usize..VOCABULARY.len(), 1..4),
        )
            .prop_map(|(tools, visible, query)| {
                let mut seen = std::collections::BTreeSet::new();
                let tools = tools
                    .into_iter()
                    .filter(|(kit, name, _)| seen.insert((*kit, *name)))
                    .map(|(kit, name, words)| {
                        (
                            ["Mail", "Chat", "Sms", "Files"][kit].to_owned(),
                            format!("{}{}", VOCABULARY[name].to_uppercase(), name),
                            words,
                        )
                    })
                    .collect();
                (tools, visible, query)
            })
    }

    const VOCABULARY: [&str; 10] =
        ["send", "read", "message", "file", "upload", "event", "invoice", "text", "phone", "delete"];

    proptest! {
        /// What a caller finds, and the scores, are those of a catalog
        /// holding only the tools it may see.
        #[test]
        fn tools_out_of_scope_change_nothing((tools, visible, query) in catalog_and_visibility()) {
            let definitions: Vec<(String, String, String)> = tools
                .iter()
                .map(|(kit, name, words)| {
                    let description: Vec<&str> = words.iter().map(|w| VOCABULARY[*w]).collect();
                    (format!("{kit}.{name}@1.0.0"), name.clone(), description.join(" "))
                })
                .collect();
            let as_rows = |keep: &dyn Fn(usize) -> bool| -> Vec<(&str, &str, &str, Value)> {
                definitions.iter().enumerate().filter(|(i, _)| keep(*i))
                    .map(|(_, (id, name, description))| (id.as_str(), name.as_str(), description.as_str(), json!({})))
                    .collect()
            };
            let full = index_of(&as_rows(&|_| true));
            let shown: std::collections::BTreeSet<String> =
                definitions.iter().enumerate().filter(|(i, _)| visible[*i]).map(|(_, d)| d.0.clone()).collect();
            let partial_rows = as_rows(&|i| visible[i]);
            let query: Vec<&str> = query.iter().map(|w| VOCABULARY[*w]).collect();
            let query = query.join(" ");
            let scope = full.scope(|_, doc| shown.contains(&doc.route.tool.definition.id));
            let in_full: Vec<(String, f32)> = full.search(&scope, &query, 100).iter()
                .map(|hit| (hit.doc.route.tool.definition.id.clone(), hit.score)).collect();
            let expected: Vec<(String, f32)> = if partial_rows.is_empty() {
                Vec::new()
            } else {
                let partial = index_of(&partial_rows);
                partial.search(&partial.latest(), &query, 100).iter()
                    .map(|hit| (hit.doc.route.tool.definition.id.clone(), hit.score)).collect()
            };
            prop_assert_eq!(in_full, expected);
        }
    }
}
