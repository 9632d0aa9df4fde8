//! The ledger's reports: totals grouped by day, chat, model or job over a time range, with
//! the cost derived from the owner's price table (`GET /api/usage`), and the records paged
//! oldest first (`GET /api/usage/records`). Pure functions over the records in memory; run
//! on the HTTP thread.

use std::collections::BTreeMap;

use serde::Serialize;

use std::collections::HashMap;

use super::limits::Price;
use super::{Prices, Record};
use crate::util::time;

/// One group's totals. `cost`: amount per currency of the rows that have a price.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) key: String,
    pub(crate) requests: u64,
    pub(crate) input_tokens: u64,
    pub(crate) cached_input_tokens: u64,
    pub(crate) cache_write_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) reasoning_tokens: u64,
    pub(crate) estimated_requests: u64,
    pub(crate) unpriced_requests: u64,
    pub(crate) cost: BTreeMap<String, f64>,
}

impl Totals {
    fn add(&mut self, r: &Record, price: Option<&Price>) {
        self.requests += 1;
        self.input_tokens += r.input_tokens;
        self.cached_input_tokens += r.cached_input_tokens;
        self.cache_write_tokens += r.cache_write_tokens;
        self.output_tokens += r.output_tokens;
        self.reasoning_tokens += r.reasoning_tokens;
        self.estimated_requests += u64::from(r.source == "estimated");
        match price {
            Some(p) => {
                let c = p.cost(r.input_tokens, r.cached_input_tokens, r.output_tokens);
                match self.cost.get_mut(&p.currency) {
                    Some(sum) => *sum += c,
                    None => {
                        self.cost.insert(p.currency.clone(), c);
                    }
                }
            }
            None => self.unpriced_requests += u64::from(r.tokens() > 0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupBy {
    Day,
    Chat,
    Model,
    Job,
}

impl GroupBy {
    pub(crate) fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "day" => GroupBy::Day,
            "chat" => GroupBy::Chat,
            "model" => GroupBy::Model,
            "job" => GroupBy::Job,
            _ => return None,
        })
    }
}

/// `GET /api/usage`'s body.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) group_by: &'static str,
    pub(crate) total: Totals,
    pub(crate) groups: Vec<Totals>,
    /// The price table's date (null: never saved).
    pub(crate) prices_updated: Option<String>,
}

/// Totals of the records with `from <= ts < to` (and of `chat` only, when given).
pub(crate) fn report(
    records: &[Record],
    prices: &Prices,
    from: u64,
    to: u64,
    group: GroupBy,
    chat: Option<&str>,
) -> Report {
    let mut total = Totals { key: "total".into(), ..Totals::default() };
    // Keys borrowed from the records (or a day's start), prices looked up once per model.
    let mut groups: HashMap<(&str, &str), Totals> = HashMap::new();
    let mut days: BTreeMap<u64, Totals> = BTreeMap::new();
    let mut priced: HashMap<(&str, &str), Option<&Price>> = HashMap::new();
    // Records are in append order, which is start order up to clock steps: find the range's
    // start by binary search, then scan.
    let start = records.partition_point(|r| r.ts < from);
    let mut day: Option<(u64, u64)> = None;
    for r in &records[start..] {
        if r.ts >= to || chat.is_some_and(|c| r.chat_id.as_deref() != Some(c)) {
            continue;
        }
        let price = *priced.entry((&r.provider, &r.model)).or_insert_with(|| prices.find(&r.provider, &r.model));
        total.add(r, price);
        let key = match group {
            GroupBy::Day => {
                let lo = match day {
                    Some((lo, hi)) if r.ts >= lo && r.ts < hi => lo,
                    _ => {
                        let lo = super::limits::day_start(r.ts);
                        day = Some((lo, lo + 86_400_000));
                        lo
                    }
                };
                days.entry(lo).or_default().add(r, price);
                continue;
            }
            GroupBy::Chat => (r.chat_id.as_deref().unwrap_or(""), ""),
            GroupBy::Model => (r.provider.as_str(), r.model.as_str()),
            GroupBy::Job => (r.job.as_str(), ""),
        };
        groups.entry(key).or_default().add(r, price);
    }
    let mut groups: Vec<Totals> = match group {
        GroupBy::Day => {
            days.into_iter().map(|(lo, t)| Totals { key: time::local_date((lo / 1000) as i64), ..t }).collect()
        }
        _ => groups
            .into_iter()
            .map(|((a, b), t)| Totals { key: if b.is_empty() { a.to_string() } else { format!("{a}/{b}") }, ..t })
            .collect(),
    };
    groups.sort_by(|a, b| a.key.cmp(&b.key));
    let name = match group {
        GroupBy::Day => "day",
        GroupBy::Chat => "chat",
        GroupBy::Model => "model",
        GroupBy::Job => "job",
    };
    Report { from, to, group_by: name, total, groups, prices_updated: prices.updated.clone() }
}

/// `GET /api/usage/records`'s body.
#[derive(Debug, Serialize)]
pub(crate) struct Page<'a> {
    pub(crate) records: &'a [Record],
    pub(crate) next_cursor: Option<String>,
}

/// Up to `limit` records from sequence number `cursor` on (oldest first); `base` is the
/// first record's number. A cursor older than what is kept starts at the oldest kept.
pub(crate) fn page(records: &[Record], base: u64, cursor: u64, limit: usize) -> Page<'_> {
    let at = cursor.saturating_sub(base).min(records.len() as u64) as usize;
    let end = (at + limit).min(records.len());
    let next = (end < records.len()).then(|| (base + end as u64).to_string());
    Page { records: &records[at..end], next_cursor: next }
}
