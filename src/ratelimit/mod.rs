//! Rate limits per caller or shared, on the tools their patterns match
//! (`[[rate_limit]]`): GCRA buckets, one per caller or one for everyone.
//!
//! Without `[state] redis` the buckets are this process's; with it they live
//! in Redis (`redis.rs`), so a fleet of replicas counts as one gateway.

mod redis;

pub(crate) use self::redis::SharedBuckets;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::redis::Taken;
use crate::auth::Caller;
use crate::config::{FailMode, Per, RateLimitConfig};

/// The limits of one config, with their buckets.
pub struct RateLimits {
    limits: Vec<Arc<Limit>>,
    /// Calls counted, to sweep idle per-user buckets now and then.
    checks: AtomicU64,
    /// What bucket times count from (kept across reloads with the buckets).
    epoch: Instant,
    /// With `[state] redis`: where the buckets are instead.
    shared: Option<Arc<SharedBuckets>>,
}

/// A limit that applies to a caller's calls to a tool, and its bucket now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitState {
    /// The `[[rate_limit]]`'s name.
    pub name: String,
    /// Calls the caller may make at once; `None` when the bucket is in a
    /// Redis that did not answer.
    pub remaining: Option<u64>,
    /// Milliseconds until the bucket is full again (0: it is); `None` as
    /// for `remaining`.
    pub reset_ms: Option<u64>,
}

/// Every this many checks, per-user buckets back at full burst are dropped,
/// so memory follows the callers active lately, not every caller ever seen.
const SWEEP_EVERY: u64 = 4096;

/// One limit: its config and its buckets. Shared by the runtimes of
/// successive reloads while its `[[rate_limit]]` is unchanged.
struct Limit {
    config: RateLimitConfig,
    /// The time between two calls at the steady rate, in nanoseconds.
    interval: u64,
    /// How far ahead of now a bucket's theoretical arrival time may run: the
    /// burst's worth of intervals.
    tolerance: u64,
    /// The theoretical arrival times, in nanoseconds since the epoch.
    buckets: Mutex<Buckets>,
}

/// One limit's buckets: one per authenticated user, and the one a global
/// limit (or every anonymous caller of a per-user limit) counts in, apart
/// from every user's, so no user id, not even "anonymous" or "", names it.
#[derive(Default)]
struct Buckets {
    users: HashMap<String, u64>,
    shared: Option<u64>,
}

/// The bucket a call counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bucket<'c> {
    /// A global limit's one bucket.
    Global,
    /// A per-user limit's bucket of the callers without a user id.
    Anonymous,
    /// A per-user limit's bucket of this authenticated user.
    User(&'c str),
}

impl Buckets {
    fn get(&mut self, bucket: Bucket<'_>) -> Option<&mut u64> {
        match bucket {
            Bucket::User(user) => self.users.get_mut(user),
            Bucket::Global | Bucket::Anonymous => self.shared.as_mut(),
        }
    }

    fn set(&mut self, bucket: Bucket<'_>, tat: u64) {
        match (bucket, self.get(bucket)) {
            (_, Some(old)) => *old = tat,
            (Bucket::User(user), None) => {
                self.users.insert(user.to_owned(), tat);
            }
            (Bucket::Global | Bucket::Anonymous, None) => self.shared = Some(tat),
        }
    }
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.limits.iter().map(|l| &l.config.name)).finish()
    }
}

impl Limit {
    fn new(config: &RateLimitConfig) -> Limit {
        let interval =
            u64::try_from((config.rate.period / config.rate.count.get()).as_nanos()).unwrap_or(u64::MAX).max(1);
        let burst = config.burst.filter(|b| *b > 0).unwrap_or(config.rate.count.get());
        Limit {
            config: config.clone(),
            interval,
            tolerance: interval.saturating_mul(u64::from(burst)),
            buckets: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        // Nothing panics while holding it; the map is consistent anyway.
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bucket a caller's call counts against.
    fn bucket<'c>(&self, caller: &'c Caller) -> Bucket<'c> {
        match (self.config.per, caller.authenticated_user()) {
            (Per::Global, _) => Bucket::Global,
            (Per::User, None) => Bucket::Anonymous,
            (Per::User, Some(user)) => Bucket::User(user),
        }
    }
}

impl RateLimits {
    /// Builds the limits of the `[[rate_limit]]` sections. A limit whose
    /// name and definition are unchanged since `previous` keeps its buckets,
    /// so a reload neither refills a limited caller nor forgets a burst.
    ///
    /// With `shared`, the buckets are in that Redis instead (and kept there
    /// across reloads by the same rule).
    pub fn new(
        configs: &[RateLimitConfig],
        previous: Option<&RateLimits>,
        shared: Option<Arc<SharedBuckets>>,
    ) -> RateLimits {
        let kept =
            |config: &RateLimitConfig| previous.and_then(|p| p.limits.iter().find(|l| l.config == *config)).cloned();
        let limits = configs.iter().map(|c| kept(c).unwrap_or_else(|| Arc::new(Limit::new(c)))).collect();
        let epoch = previous.map_or_else(Instant::now, |p| p.epoch);
        RateLimits { limits, checks: AtomicU64::new(0), epoch, shared }
    }

    /// The shared buckets, when they are in `redis` (to keep them across a
    /// reload).
    pub(crate) fn shared_in(&self, redis: &Arc<crate::redis_client::SharedRedis>) -> Option<Arc<SharedBuckets>> {
        self.shared.as_ref().filter(|s| s.is_in(redis)).cloned()
    }

    /// Calls decided without Redis while it could not answer: (served,
    /// refused).
    pub fn store_failures(&self) -> (u64, u64) {
        self.shared
            .as_ref()
            .map_or((0, 0), |s| (s.failed_open.load(Ordering::Relaxed), s.failed_closed.load(Ordering::Relaxed)))
    }

    /// Counts a call by `caller` to `key` against every limit that applies,
    /// in this process's buckets or in the shared ones.
    pub async fn check(&self, caller: &Caller, key: &str) -> Result<(), (String, Duration)> {
        // Without limits a call touches nothing shared here.
        if self.limits.is_empty() {
            return Ok(());
        }
        match &self.shared {
            None => self.check_local(caller, key),
            Some(shared) => self.check_shared(shared, caller, key).await,
        }
    }

    /// The shared check: one atomic Redis script over every matching limit.
    /// Redis unavailable: served uncounted, unless a matching limit is
    /// `fail = "closed"`, which refuses with a one-second `Retry-After`.
    async fn check_shared(&self, shared: &SharedBuckets, caller: &Caller, key: &str) -> Result<(), (String, Duration)> {
        let matching: Vec<&Arc<Limit>> = self.applying(key).collect();
        if matching.is_empty() {
            return Ok(());
        }
        let buckets: Vec<_> = matching.iter().map(|l| (&l.config, l.interval, l.tolerance, l.bucket(caller))).collect();
        match shared.take(&buckets).await {
            Ok(Taken::Counted) => Ok(()),
            Ok(Taken::Full { index, wait }) => {
                let name = matching.get(index).map_or_else(String::new, |l| l.config.name.clone());
                Err((name, wait))
            }
            Err(e) => {
                let closed = matching.iter().find(|l| l.config.fail == FailMode::Closed);
                shared.log_unavailable(&e, closed.is_some());
                shared.count_failure(closed.is_some());
                match closed {
                    Some(limit) => Err((limit.config.name.clone(), Duration::from_secs(1))),
                    None => Ok(()),
                }
            }
        }
    }

    /// Counts a call in this process's buckets of every limit that applies,
    /// all or nothing: over one of them, how long until a call would be
    /// allowed, and no bucket is touched (a refused call consumes nothing).
    ///
    /// The GCRA, by hand rather than with `governor`: a call that matches
    /// several limits must take from all of them or from none, and
    /// governor's buckets can only be taken from one at a time. The matching
    /// limits' locks are taken in config order, so two calls never deadlock.
    fn check_local(&self, caller: &Caller, key: &str) -> Result<(), (String, Duration)> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        // Each matching limit, locked in config order, with the arrival time
        // the call would give it; nothing is written until all have room.
        let mut admitted = Vec::new();
        let mut now = None;
        for limit in self.applying(key) {
            let now = *now.get_or_insert_with(|| self.now());
            let mut buckets = limit.lock();
            let tat = buckets.get(limit.bucket(caller)).copied().unwrap_or(now).max(now);
            let next = tat.saturating_add(limit.interval);
            if next - now > limit.tolerance {
                return Err((limit.config.name.clone(), Duration::from_nanos(next - now - limit.tolerance)));
            }
            admitted.push((limit, buckets, next));
        }
        for (limit, mut buckets, next) in admitted {
            buckets.set(limit.bucket(caller), next);
        }
        Ok(())
    }

    /// The limits whose patterns match `key`, in config order: what a call
    /// counts against, and what `GET /explain` reports.
    fn applying<'s>(&'s self, key: &'s str) -> impl Iterator<Item = &'s Arc<Limit>> + 's {
        self.limits.iter().filter(move |l| l.config.tools.iter().any(|p| p.matches(key)))
    }

    /// The limits a call by `caller` to `key` would count against, and
    /// their buckets now, counting nothing. Shared buckets are read from
    /// Redis (one read-only script, no call counted); when Redis does not
    /// answer, their state is `None`.
    pub async fn state(&self, caller: &Caller, key: &str) -> Vec<LimitState> {
        let matching: Vec<&Arc<Limit>> = self.applying(key).collect();
        // Each bucket's theoretical arrival time ahead of now, nanoseconds.
        let ahead: Vec<Option<u64>> = match &self.shared {
            None => {
                let now = self.now();
                matching
                    .iter()
                    .map(|l| Some(l.lock().get(l.bucket(caller)).copied().unwrap_or(now).max(now) - now))
                    .collect()
            }
            Some(shared) if !matching.is_empty() => {
                let buckets: Vec<_> = matching.iter().map(|l| (&l.config, l.bucket(caller))).collect();
                match shared.peek(&buckets).await {
                    Ok(ahead) => ahead.into_iter().map(Some).collect(),
                    Err(_) => vec![None; matching.len()],
                }
            }
            Some(_) => Vec::new(),
        };
        matching
            .iter()
            .zip(ahead)
            .map(|(limit, ahead)| LimitState {
                name: limit.config.name.clone(),
                // GCRA: room for what the tolerance still holds ahead of the
                // bucket's theoretical arrival time.
                remaining: ahead.map(|a| limit.tolerance.saturating_sub(a) / limit.interval),
                reset_ms: ahead.map(|a| a.div_ceil(1_000_000)),
            })
            .collect()
    }

    /// Nanoseconds since the epoch.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Drops per-user buckets that are full again (their callers idle).
    fn sweep(&self) {
        let now = self.now();
        for limit in self.limits.iter().filter(|l| l.config.per == Per::User) {
            let mut buckets = limit.lock();
            buckets.users.retain(|_, tat| *tat > now);
            buckets.users.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn limits(toml_text: &str) -> RateLimits {
        #[derive(Deserialize)]
        struct File {
            rate_limit: Vec<RateLimitConfig>,
        }
        let file: File = toml::from_str(toml_text).expect("rate limits parse");
        RateLimits::new(&file.rate_limit, None, None)
    }

    fn user(id: &str) -> Caller {
        Caller::Jwt { user_id: id.to_owned(), claims: serde_json::Value::Null }
    }

    fn per_user_buckets(limits: &RateLimits) -> usize {
        limits.limits.iter().filter(|l| l.config.per == Per::User).map(|l| l.lock().users.len()).sum()
    }

    #[test]
    fn a_caller_over_its_limit_waits_while_another_is_unaffected() {
        let limits = limits("[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"1/h\"\n");
        assert!(limits.check_local(&user("ann"), "Calc.Add").is_ok());
        let (name, wait) = limits.check_local(&user("ann"), "Calc.Add").expect_err("over the limit");
        assert_eq!(name, "calc");
        assert!(wait > Duration::from_secs(60));
        assert!(limits.check_local(&user("bob"), "Calc.Add").is_ok(), "another caller has its own bucket");
        assert!(limits.check_local(&user("ann"), "Mail.Send").is_ok(), "other tools are not limited");
    }

    #[test]
    fn no_user_id_names_the_anonymous_or_global_bucket() {
        let limits = limits(
            "[[rate_limit]]\nname = \"u\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"1/h\"\n\
             [[rate_limit]]\nname = \"g\"\ntools = [\"Mail.*\"]\nper = \"global\"\nrate = \"1/h\"\n",
        );
        assert!(limits.check_local(&Caller::Anonymous, "Calc.Add").is_ok());
        assert!(limits.check_local(&Caller::Anonymous, "Calc.Add").is_err(), "anonymous callers share one");
        for name in ["anonymous", ""] {
            assert!(limits.check_local(&user(name), "Calc.Add").is_ok(), "user {name:?} has a bucket of its own");
        }
        assert!(limits.check_local(&user(""), "Mail.Send").is_ok());
        assert!(limits.check_local(&user("x"), "Mail.Send").is_err(), "one global bucket");
    }

    #[test]
    fn idle_per_user_buckets_are_swept() {
        let limits =
            limits("[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"1000/s\"\n");
        for n in 0..100 {
            assert!(limits.check_local(&user(&format!("user-{n}")), "Calc.Add").is_ok());
        }
        assert_eq!(per_user_buckets(&limits), 100);
        // Long enough for every bucket to be full again (buckets read
        // std's monotonic clock, shared with other threads: real time must
        // pass), then enough checks
        // (by one caller, on an unlimited tool) to reach a sweep.
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..SWEEP_EVERY {
            let _ = limits.check_local(&user("sweeper"), "Other.Tool");
        }
        assert!(per_user_buckets(&limits) < 100, "idle buckets must be dropped: {}", per_user_buckets(&limits));
    }

    #[test]
    fn a_burst_then_the_steady_rate() {
        let limits = limits(
            "[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"global\"\nrate = \"2/h\"\nburst = 3\n",
        );
        for n in 0..3 {
            assert!(limits.check_local(&user(&format!("u{n}")), "Calc.Add").is_ok(), "call {n} of the burst");
        }
        let (_, wait) = limits.check_local(&user("u9"), "Calc.Add").expect_err("the burst is spent, for everyone");
        assert!(wait > Duration::from_secs(29 * 60) && wait <= Duration::from_secs(30 * 60), "{wait:?}");
    }

    #[tokio::test]
    async fn state_counts_down_with_calls_and_touches_nothing() {
        let limits = limits(
            "[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"2/h\"\nburst = 3\n",
        );
        let ann = user("ann");
        let state = |caller: Caller, key: &'static str| {
            let limits = &limits;
            async move { limits.state(&caller, key).await }
        };
        let remaining = |caller: &Caller| {
            let caller = caller.clone();
            async move { state(caller, "Calc.Add").await[0].remaining }
        };
        assert_eq!(remaining(&ann).await, Some(3));
        assert_eq!(state(ann.clone(), "Calc.Add").await[0].reset_ms, Some(0));
        for _ in 0..5 {
            assert_eq!(remaining(&ann).await, Some(3), "asking counts nothing");
        }
        assert!(limits.check_local(&ann, "Calc.Add").is_ok());
        assert_eq!(remaining(&ann).await, Some(2));
        assert!(state(ann.clone(), "Calc.Add").await[0].reset_ms > Some(29 * 60 * 1000));
        assert_eq!(remaining(&user("bob")).await, Some(3), "another caller's bucket is its own");
        assert!(state(ann.clone(), "Mail.Send").await.is_empty(), "no limit applies");
        assert!(limits.check_local(&ann, "Calc.Add").is_ok() && limits.check_local(&ann, "Calc.Add").is_ok());
        assert_eq!(remaining(&ann).await, Some(0));
        assert!(limits.check_local(&ann, "Calc.Add").is_err(), "0 left means refused");
    }

    #[test]
    fn a_refused_call_consumes_nothing() {
        let limits = limits(
            "[[rate_limit]]\nname = \"wide\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"3/h\"\n\n\
             [[rate_limit]]\nname = \"narrow\"\ntools = [\"Calc.Add\"]\nper = \"user\"\nrate = \"1/h\"\n",
        );
        assert!(limits.check_local(&user("ann"), "Calc.Add").is_ok());
        // Refused by "narrow" twice: "wide" must not count those.
        for _ in 0..2 {
            assert_eq!(limits.check_local(&user("ann"), "Calc.Add").expect_err("narrow").0, "narrow");
        }
        assert!(limits.check_local(&user("ann"), "Calc.Sub").is_ok(), "wide: 2 of 3");
        assert!(limits.check_local(&user("ann"), "Calc.Sub").is_ok(), "wide: 3 of 3");
        assert_eq!(limits.check_local(&user("ann"), "Calc.Sub").expect_err("wide is spent").0, "wide");
    }

    #[test]
    fn unchanged_limits_keep_their_buckets_across_a_reload() {
        let text = "[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"1/h\"\n";
        let before = limits(text);
        assert!(before.check_local(&user("ann"), "Calc.Add").is_ok());
        #[derive(Deserialize)]
        struct File {
            rate_limit: Vec<RateLimitConfig>,
        }
        let same: File = toml::from_str(text).expect("parse");
        let after = RateLimits::new(&same.rate_limit, Some(&before), None);
        assert!(after.check_local(&user("ann"), "Calc.Add").is_err(), "still limited after an unrelated reload");
        let changed: File = toml::from_str(&text.replace("1/h", "2/h")).expect("parse");
        let redefined = RateLimits::new(&changed.rate_limit, Some(&after), None);
        assert!(redefined.check_local(&user("ann"), "Calc.Add").is_ok(), "a changed limit starts afresh");
    }
}
