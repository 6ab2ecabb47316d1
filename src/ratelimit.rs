//! Rate limits per caller or shared, on the tools their patterns match
//! (`[[rate_limit]]`, the `governor` crate's GCRA buckets).
//!
//! Limits are per gateway process: with N replicas behind a load balancer, a
//! caller gets up to N times the rate; size `rate` as the total divided by N.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::auth::{Caller, CallerKind};
use crate::policy::ToolPattern;

/// One `[[rate_limit]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// A name, for logs.
    pub name: String,
    /// The tools it applies to (`Toolkit.Name` patterns, `*` wildcards).
    pub tools: Vec<ToolPattern>,
    /// `user`: a bucket per caller (anonymous callers share one); `global`:
    /// one bucket for everyone.
    pub per: Per,
    /// `"5/s"`, `"100/m"` or `"1000/h"`.
    pub rate: Rate,
    /// Calls allowed at once above the steady rate (default: the rate's count).
    #[serde(default)]
    pub burst: Option<u32>,
}

/// Whose bucket a call counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// One bucket per caller.
    User,
    /// One bucket shared by all.
    Global,
}

/// A count per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: NonZeroU32,
    period: Duration,
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || D::Error::custom(format!("invalid rate {text:?}: write e.g. \"5/s\", \"100/m\" or \"1000/h\""));
        let (count, unit) = text.split_once('/').ok_or_else(bad)?;
        let count = count.trim().parse::<u32>().ok().and_then(NonZeroU32::new).ok_or_else(bad)?;
        let period = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        Ok(Rate { count, period })
    }
}

/// The limits of one config, with their buckets.
#[derive(Default)]
pub struct RateLimits {
    limits: Vec<Limit>,
    /// Calls counted, to sweep idle per-user buckets now and then.
    checks: std::sync::atomic::AtomicU64,
}

/// Every this many checks, per-user buckets back at full burst are dropped,
/// so memory follows the callers active lately, not every caller ever seen.
const SWEEP_EVERY: u64 = 4096;

struct Limit {
    name: String,
    tools: Vec<ToolPattern>,
    bucket: Bucket,
}

enum Bucket {
    Global(DefaultDirectRateLimiter),
    PerUser(DefaultKeyedRateLimiter<String>),
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.limits.iter().map(|l| &l.name)).finish()
    }
}

impl RateLimits {
    /// Builds the buckets for the `[[rate_limit]]` sections.
    pub fn new(configs: &[RateLimitConfig]) -> RateLimits {
        let limits = configs
            .iter()
            .map(|c| {
                let per_cell = c.rate.period / c.rate.count.get();
                let burst = c.burst.and_then(NonZeroU32::new).unwrap_or(c.rate.count);
                let quota = Quota::with_period(per_cell.max(Duration::from_nanos(1)))
                    .unwrap_or_else(|| Quota::per_second(c.rate.count))
                    .allow_burst(burst);
                let bucket = match c.per {
                    Per::Global => Bucket::Global(RateLimiter::direct(quota)),
                    Per::User => Bucket::PerUser(RateLimiter::keyed(quota)),
                };
                Limit { name: c.name.clone(), tools: c.tools.clone(), bucket }
            })
            .collect();
        RateLimits { limits, checks: Default::default() }
    }

    /// Counts a call by `caller` to `key` against every limit that applies;
    /// over one, how long until a call would be allowed.
    pub fn check(&self, caller: &Caller, key: &str) -> Result<(), (String, Duration)> {
        // Without limits a call touches nothing shared here.
        if self.limits.is_empty() {
            return Ok(());
        }
        if self.checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep();
        }
        for limit in self.limits.iter().filter(|l| l.tools.iter().any(|p| p.matches(key))) {
            let verdict = match &limit.bucket {
                Bucket::Global(bucket) => bucket.check(),
                Bucket::PerUser(bucket) => {
                    let who = match (caller.kind, &caller.user_id) {
                        (CallerKind::Anonymous, _) | (_, None) => "anonymous",
                        (_, Some(user)) => user.as_str(),
                    };
                    bucket.check_key(&who.to_owned())
                }
            };
            if let Err(not_until) = verdict {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                return Err((limit.name.clone(), wait));
            }
        }
        Ok(())
    }

    /// Drops per-user buckets that are full again (their callers idle).
    fn sweep(&self) {
        for limit in &self.limits {
            if let Bucket::PerUser(bucket) = &limit.bucket {
                bucket.retain_recent();
                bucket.shrink_to_fit();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(toml_text: &str) -> RateLimits {
        #[derive(Deserialize)]
        struct File {
            rate_limit: Vec<RateLimitConfig>,
        }
        let file: File = toml::from_str(toml_text).expect("rate limits parse");
        RateLimits::new(&file.rate_limit)
    }

    fn user(id: &str) -> Caller {
        Caller { user_id: Some(id.to_owned()), claims: serde_json::Value::Null, kind: CallerKind::Jwt }
    }

    fn per_user_buckets(limits: &RateLimits) -> usize {
        limits.limits.iter().map(|l| if let Bucket::PerUser(b) = &l.bucket { b.len() } else { 0 }).sum()
    }

    #[test]
    fn a_caller_over_its_limit_waits_while_another_is_unaffected() {
        let limits = limits("[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"1/h\"\n");
        assert!(limits.check(&user("ann"), "Calc.Add").is_ok());
        let (name, wait) = limits.check(&user("ann"), "Calc.Add").expect_err("over the limit");
        assert_eq!(name, "calc");
        assert!(wait > Duration::from_secs(60));
        assert!(limits.check(&user("bob"), "Calc.Add").is_ok(), "another caller has its own bucket");
        assert!(limits.check(&user("ann"), "Mail.Send").is_ok(), "other tools are not limited");
    }

    #[test]
    fn idle_per_user_buckets_are_swept() {
        let limits = limits("[[rate_limit]]\nname = \"calc\"\ntools = [\"Calc.*\"]\nper = \"user\"\nrate = \"1000/s\"\n");
        for n in 0..100 {
            assert!(limits.check(&user(&format!("user-{n}")), "Calc.Add").is_ok());
        }
        assert_eq!(per_user_buckets(&limits), 100);
        // Long enough for every bucket to be full again, then enough checks
        // (by one caller, on an unlimited tool) to reach a sweep.
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..SWEEP_EVERY {
            let _ = limits.check(&user("sweeper"), "Other.Tool");
        }
        assert!(per_user_buckets(&limits) < 100, "idle buckets must be dropped: {}", per_user_buckets(&limits));
    }
}
