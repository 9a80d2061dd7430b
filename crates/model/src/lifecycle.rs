//! A bucket's lifecycle rules (S3's bucket lifecycle configuration), as its settings keep
//! them ([`crate::account::BucketSettings::lifecycle`]), and what they decide for one
//! version: whether it expires, and when. The drives apply them in the background
//! (`oed_repair::lifecycle`); the S3 layer reads and writes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A day, in milliseconds.
pub const DAY_MS: u64 = 86_400_000;

/// The most rules a configuration holds (S3's limit).
pub const MAX_RULES: usize = 1000;

/// The longest rule id (S3's limit, in characters).
pub const MAX_ID_CHARS: usize = 255;

/// The most newer noncurrent versions a rule keeps (S3's limit).
pub const MAX_NEWER_VERSIONS: u32 = 100;

/// A bucket's lifecycle configuration: its rules, in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    /// The rules.
    pub rules: Vec<Rule>,
}

/// One rule: which versions it applies to, and what happens to them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Its id (given, or made when the configuration was put).
    pub id: String,
    /// `Enabled` (true) or `Disabled`.
    pub enabled: bool,
    /// Which objects it applies to.
    #[serde(default)]
    pub filter: Filter,
    /// What happens to current versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<Expiration>,
    /// What happens to noncurrent versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent: Option<NoncurrentExpiration>,
    /// Days after its start an unfinished multipart upload is aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_uploads_after_days: Option<u32>,
}

/// How a rule's filter was written, so that it is answered back as it was given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterForm {
    /// `<Filter/>` (or `<Filter><Prefix/></Filter>` read as [`FilterForm::Prefix`]): every
    /// object.
    #[default]
    Empty,
    /// A `<Prefix>` of the rule itself (the form before filters).
    RulePrefix,
    /// `<Filter><Prefix>`.
    Prefix,
    /// `<Filter><Tag>`.
    Tag,
    /// `<Filter><ObjectSizeGreaterThan>`.
    SizeGreaterThan,
    /// `<Filter><ObjectSizeLessThan>`.
    SizeLessThan,
    /// `<Filter><And>`.
    And,
}

/// Which versions a rule applies to: all of its conditions hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// How it was written.
    #[serde(default)]
    pub form: FilterForm,
    /// The key starts with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// The version carries each of these tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The version is larger than this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<u64>,
    /// The version is smaller than this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<u64>,
}

/// What happens to current versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expiration {
    /// Days after its write a current version expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    /// The date (midnight UTC, milliseconds since the epoch) from which current versions
    /// expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_ms: Option<u64>,
    /// Whether a delete marker with no noncurrent versions behind it is removed; `None`
    /// when the rule did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_object_delete_marker: Option<bool>,
}

/// What happens to noncurrent versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoncurrentExpiration {
    /// Days after it stopped being current a noncurrent version expires.
    pub days: u32,
    /// The newest noncurrent versions of a key this many are kept, whatever their age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_versions: Option<u32>,
}

/// The time rules are applied at, and how long their day is.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Now, milliseconds since the epoch.
    pub now_ms: u64,
    /// A day, in milliseconds: [`DAY_MS`], or shorter for tests (`lifecycle_day_seconds`).
    pub day_ms: u64,
}

impl Clock {
    /// When `days` days after `since_ms` are over. With real days, as S3 counts: the
    /// time `days` days later, rounded up to the next midnight UTC. With a shorter test
    /// day, exactly `days` of them later.
    #[must_use]
    pub fn after(self, since_ms: u64, days: u32) -> u64 {
        let end = since_ms.saturating_add(u64::from(days).saturating_mul(self.day_ms));
        if self.day_ms == DAY_MS {
            end.div_ceil(DAY_MS).saturating_mul(DAY_MS)
        } else {
            end
        }
    }
}

/// A version as the rules see it.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// Its key, as clients name it.
    pub key: &'a str,
    /// Its size in bytes.
    pub size: u64,
    /// Its tags.
    pub tags: &'a BTreeMap<String, String>,
}

impl Filter {
    /// Whether `v` passes the filter.
    #[must_use]
    pub fn matches(&self, v: Subject<'_>) -> bool {
        v.key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, val)| v.tags.get(k) == Some(val))
            && self.size_greater_than.is_none_or(|n| v.size > n)
            && self.size_less_than.is_none_or(|n| v.size < n)
    }
}

impl Lifecycle {
    /// The enabled rules.
    fn enabled(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(|r| r.enabled)
    }

    /// Whether any enabled rule has an action.
    #[must_use]
    pub fn any_enabled(&self) -> bool {
        self.enabled().next().is_some()
    }

    /// When the current version `v`, written at `written_ms`, expires, and by which rule:
    /// the earliest of the enabled rules' that apply to it (`Days` or `Date`).
    #[must_use]
    pub fn current_expiry(
        &self,
        v: Subject<'_>,
        written_ms: u64,
        clock: Clock,
    ) -> Option<(u64, &str)> {
        self.enabled()
            .filter(|r| r.filter.matches(v))
            .filter_map(|r| {
                let e = r.expiration.as_ref()?;
                let due = match (e.days, e.date_ms) {
                    (Some(d), _) => clock.after(written_ms, d),
                    (None, Some(date)) => date,
                    (None, None) => return None,
                };
                Some((due, r.id.as_str()))
            })
            .min_by_key(|(due, _)| *due)
    }

    /// Whether a current delete marker of `key`, written at `written_ms`, with no
    /// noncurrent version behind it is removed now: by a rule with
    /// `ExpiredObjectDeleteMarker`, or, as S3 does, by one whose `Days` the marker has
    /// outlived. A marker has no tags and no size, so only rules without tag or size
    /// conditions apply to it.
    #[must_use]
    pub fn removes_lone_marker(&self, key: &str, written_ms: u64, clock: Clock) -> bool {
        self.enabled().any(|r| {
            let Some(e) = r.expiration.as_ref() else {
                return false;
            };
            let applies = key.starts_with(&r.filter.prefix)
                && r.filter.tags.is_empty()
                && r.filter.size_greater_than.is_none()
                && r.filter.size_less_than.is_none();
            applies
                && (e.expired_object_delete_marker == Some(true)
                    || e.days
                        .is_some_and(|d| clock.after(written_ms, d) <= clock.now_ms))
        })
    }

    /// When the noncurrent version `v` expires: it stopped being current at
    /// `noncurrent_since_ms`, and `newer` noncurrent versions of its key are newer than
    /// it. The earliest of the enabled rules' that apply; `None` when every rule that
    /// applies keeps it (it is among the newest they keep) or none applies.
    #[must_use]
    pub fn noncurrent_expiry(
        &self,
        v: Subject<'_>,
        noncurrent_since_ms: u64,
        newer: usize,
        clock: Clock,
    ) -> Option<u64> {
        self.enabled()
            .filter(|r| r.filter.matches(v))
            .filter_map(|r| {
                let n = r.noncurrent.as_ref()?;
                let keep = n.newer_versions.map_or(0, |k| k as usize);
                (newer >= keep).then(|| clock.after(noncurrent_since_ms, n.days))
            })
            .min()
    }

    /// Whether any enabled rule expires noncurrent versions.
    #[must_use]
    pub fn expires_noncurrent(&self) -> bool {
        self.enabled().any(|r| r.noncurrent.is_some())
    }

    /// When an unfinished multipart upload of `key`, started at `started_ms`, is
    /// aborted: the earliest of the enabled rules' that apply (by prefix: such rules
    /// have no tag or size conditions).
    #[must_use]
    pub fn abort_due(&self, key: &str, started_ms: u64, clock: Clock) -> Option<u64> {
        self.abort_rule(key, started_ms, clock).map(|(due, _)| due)
    }

    /// [`Lifecycle::abort_due`], with the id of the rule that decides it.
    #[must_use]
    pub fn abort_rule(&self, key: &str, started_ms: u64, clock: Clock) -> Option<(u64, &str)> {
        self.enabled()
            .filter(|r| key.starts_with(&r.filter.prefix))
            .filter_map(|r| {
                Some((
                    clock.after(started_ms, r.abort_uploads_after_days?),
                    r.id.as_str(),
                ))
            })
            .min_by_key(|(due, _)| *due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, prefix: &str) -> Rule {
        Rule {
            id: id.into(),
            enabled: true,
            filter: Filter {
                form: FilterForm::Prefix,
                prefix: prefix.into(),
                ..Filter::default()
            },
            ..Rule::default()
        }
    }

    const REAL: Clock = Clock {
        now_ms: 0,
        day_ms: DAY_MS,
    };

    #[test]
    fn real_days_end_at_the_next_midnight_and_test_days_exactly() {
        // 2026-11-29 09:00 UTC.
        let t = 1_796_029_200_000;
        let midnight_after = (t / DAY_MS + 1) * DAY_MS;
        assert_eq!(REAL.after(t, 1), midnight_after + DAY_MS);
        assert_eq!(REAL.after(midnight_after, 1), midnight_after + DAY_MS);
        let short = Clock {
            now_ms: 0,
            day_ms: 2000,
        };
        assert_eq!(short.after(t, 3), t + 6000);
    }

    #[test]
    fn filters_take_prefix_tags_and_sizes_together() {
        let tags: BTreeMap<String, String> = [("k".into(), "v".into()), ("x".into(), "y".into())]
            .into_iter()
            .collect();
        let v = Subject {
            key: "logs/a",
            size: 100,
            tags: &tags,
        };
        let mut f = Filter {
            prefix: "logs/".into(),
            ..Filter::default()
        };
        assert!(f.matches(v));
        f.tags.insert("k".into(), "v".into());
        assert!(f.matches(v));
        f.size_greater_than = Some(99);
        f.size_less_than = Some(101);
        assert!(f.matches(v));
        f.size_less_than = Some(100);
        assert!(!f.matches(v));
        f.size_less_than = None;
        f.tags.insert("k".into(), "other".into());
        assert!(!f.matches(v));
        f.tags.clear();
        f.prefix = "tmp/".into();
        assert!(!f.matches(v));
    }

    #[test]
    fn the_earliest_rule_that_applies_decides_and_disabled_rules_do_nothing() {
        let none = BTreeMap::new();
        let v = Subject {
            key: "a/b",
            size: 1,
            tags: &none,
        };
        let mut late = rule("late", "a/");
        late.expiration = Some(Expiration {
            days: Some(30),
            ..Expiration::default()
        });
        let mut dated = rule("dated", "");
        dated.expiration = Some(Expiration {
            date_ms: Some(5 * DAY_MS),
            ..Expiration::default()
        });
        let mut off = rule("off", "");
        off.enabled = false;
        off.expiration = Some(Expiration {
            days: Some(1),
            ..Expiration::default()
        });
        let mut other = rule("other", "b/");
        other.expiration = off.expiration.clone();
        let lc = Lifecycle {
            rules: vec![late, dated, off, other],
        };
        assert_eq!(lc.current_expiry(v, 0, REAL), Some((5 * DAY_MS, "dated")));
        assert_eq!(
            lc.current_expiry(
                v,
                0,
                Clock {
                    now_ms: 0,
                    day_ms: 1
                }
            ),
            Some((30, "late"))
        );
    }

    #[test]
    fn newer_noncurrent_versions_are_kept_whatever_their_age() {
        let none = BTreeMap::new();
        let v = Subject {
            key: "k",
            size: 1,
            tags: &none,
        };
        let mut r = rule("nc", "");
        r.noncurrent = Some(NoncurrentExpiration {
            days: 1,
            newer_versions: Some(2),
        });
        let lc = Lifecycle { rules: vec![r] };
        let clock = Clock {
            now_ms: 0,
            day_ms: 10,
        };
        assert_eq!(lc.noncurrent_expiry(v, 100, 0, clock), None);
        assert_eq!(lc.noncurrent_expiry(v, 100, 1, clock), None);
        assert_eq!(lc.noncurrent_expiry(v, 100, 2, clock), Some(110));
    }

    #[test]
    fn lone_markers_and_uploads_follow_prefix_rules_only() {
        let mut m = rule("m", "logs/");
        m.expiration = Some(Expiration {
            expired_object_delete_marker: Some(true),
            ..Expiration::default()
        });
        let mut tagged = rule("t", "");
        tagged.filter.tags.insert("a".into(), "b".into());
        tagged.expiration = m.expiration.clone();
        let mut up = rule("u", "tmp/");
        up.abort_uploads_after_days = Some(2);
        let lc = Lifecycle {
            rules: vec![m, tagged, up],
        };
        let clock = Clock {
            now_ms: 0,
            day_ms: 10,
        };
        assert!(lc.removes_lone_marker("logs/x", 0, clock));
        assert!(!lc.removes_lone_marker("data/x", 0, clock));
        // A rule's Days removes a marker that outlived them.
        let mut days = rule("d", "data/");
        days.expiration = Some(Expiration {
            days: Some(2),
            ..Expiration::default()
        });
        let lc2 = Lifecycle { rules: vec![days] };
        let at = |now_ms| Clock { now_ms, day_ms: 10 };
        assert!(!lc2.removes_lone_marker("data/x", 0, at(19)));
        assert!(lc2.removes_lone_marker("data/x", 0, at(20)));
        assert_eq!(lc.abort_due("tmp/x", 5, clock), Some(25));
        assert_eq!(lc.abort_due("logs/x", 5, clock), None);
    }
}
