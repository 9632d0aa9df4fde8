//! `/api/usage`, `/api/usage/records`, `/api/settings/prices` and `/api/settings/budgets`
//! (docs/usage.md): the ledger's reports and the owner's price table and budgets. Runs on
//! the HTTP thread; the ledger's lock is held only for a scan.

use serde::Deserialize;

use super::api::{only, Api};
use super::shape::body;
use super::{Req, Resp};
use crate::ledger::report::{self, GroupBy};
use crate::ledger::{Budgets, Cap, Ledger, Price, Prices};
use crate::util::body::{Extras, List, Model, Nested};

/// Most records one page returns.
const MAX_PAGE: usize = 1000;

fn ledger(api: &Api) -> Result<&Ledger, Resp> {
    api.llm.ledger().map(|l| &**l).ok_or_else(|| Resp::detail(503, "the usage ledger is not kept"))
}

/// A non-negative integer query parameter; `Err` names it.
fn number(req: &Req, name: &str) -> Result<Option<u64>, Resp> {
    match req.query_param(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| Resp::detail(422, &format!("{name} must be a non-negative integer"))),
    }
}

pub(crate) fn route_usage(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    let out = match rest {
        [] => only(m, &["GET"]).map(Err).unwrap_or_else(|| usage(api, req)),
        ["records"] => only(m, &["GET"]).map(Err).unwrap_or_else(|| records(api, req)),
        _ => Err(Resp::detail(404, "Not Found")),
    };
    out.unwrap_or_else(|r| r)
}

/// `GET /api/usage?from&to&group_by=day|chat|model|job[&chat_id]`: `from`/`to` in epoch
/// milliseconds (`to` exclusive; default: everything kept).
fn usage(api: &Api, req: &Req) -> Result<Resp, Resp> {
    let l = ledger(api)?;
    let from = number(req, "from")?.unwrap_or(0);
    let to = number(req, "to")?.unwrap_or(u64::MAX);
    let group = match req.query_param("group_by") {
        None => GroupBy::Day,
        Some(g) => GroupBy::parse(&g).ok_or_else(|| Resp::detail(422, "group_by must be day, chat, model or job"))?,
    };
    let chat = req.query_param("chat_id");
    let prices = l.limits.prices();
    Ok(l.with_records(|records, _| Resp::ok(&report::report(records, &prices, from, to, group, chat.as_deref()))))
}

/// `GET /api/usage/records?limit&cursor`: oldest first.
fn records(api: &Api, req: &Req) -> Result<Resp, Resp> {
    let l = ledger(api)?;
    let limit = number(req, "limit")?.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE as u64 {
        return Err(Resp::detail(422, &format!("limit must be from 1 to {MAX_PAGE}")));
    }
    let cursor = match req.query_param("cursor") {
        None => 0,
        Some(c) => c.trim().parse::<u64>().map_err(|_| Resp::detail(422, "cursor is not one this server gave"))?,
    };
    Ok(l.with_records(|records, base| Resp::ok(&report::page(records, base, cursor, limit as usize))))
}

fn saved<T: serde::Serialize>(r: Result<T, (u16, String)>) -> Resp {
    match r {
        Ok(v) => Resp::ok(&v),
        Err((status, msg)) => Resp::detail(status, &msg),
    }
}

pub(crate) fn route_prices(api: &Api, m: &str, req: &Req) -> Resp {
    let l = match ledger(api) {
        Ok(l) => l,
        Err(r) => return r,
    };
    match m {
        "GET" => Resp::ok(&l.limits.prices()),
        "PUT" => match body::<PricesBody>(req) {
            Ok(p) => saved(l.limits.set_prices(p.into())),
            Err(r) => r,
        },
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}

pub(crate) fn route_budgets(api: &Api, m: &str, req: &Req) -> Resp {
    let l = match ledger(api) {
        Ok(l) => l,
        Err(r) => return r,
    };
    match m {
        "GET" => Resp::ok(&l.limits.budgets()),
        "PUT" => match body::<BudgetsBody>(req) {
            Ok(b) => saved(l.limits.set_budgets(b.into())),
            Err(r) => r,
        },
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}

/// `PUT /api/settings/prices`: the table as `GET` returns it (the server sets `updated`).
/// Shapes here; the value rules (ranges, names, currency codes, the row count) are the
/// ledger's, a string `detail`.
#[derive(Deserialize)]
struct PricesBody {
    #[serde(rename = "updated")]
    _updated: Option<Option<String>>,
    models: Option<List<Nested<PriceBody>>>,
}

impl Model for PricesBody {
    const EXTRAS: Extras = Extras::Forbid;
}

#[derive(Deserialize)]
struct PriceBody {
    provider: String,
    model: String,
    input: f64,
    cached_input: Option<Option<f64>>,
    output: f64,
    currency: String,
}

impl Model for PriceBody {
    const EXTRAS: Extras = Extras::Forbid;
}

impl From<PricesBody> for Prices {
    fn from(b: PricesBody) -> Prices {
        let rows = b.models.map(|l| l.0).unwrap_or_default();
        let models = rows
            .into_iter()
            .map(|Nested(r)| Price {
                provider: r.provider,
                model: r.model,
                input: r.input,
                cached_input: r.cached_input.flatten(),
                output: r.output,
                currency: r.currency,
            })
            .collect();
        Prices { updated: None, models }
    }
}

/// `PUT /api/settings/budgets`: each cap may be left out or `null` (no cap).
#[derive(Deserialize)]
struct BudgetsBody {
    chat: Option<Option<Nested<CapBody>>>,
    day: Option<Option<Nested<CapBody>>>,
    background_day: Option<Option<Nested<CapBody>>>,
}

impl Model for BudgetsBody {
    const EXTRAS: Extras = Extras::Forbid;
}

/// One cap: tokens and/or cost, each absent or `null` for none.
#[derive(Deserialize)]
struct CapBody {
    tokens: Option<Option<u64>>,
    cost: Option<Option<f64>>,
}

impl Model for CapBody {
    const EXTRAS: Extras = Extras::Forbid;
}

impl From<BudgetsBody> for Budgets {
    fn from(b: BudgetsBody) -> Budgets {
        let cap = |c: Option<Option<Nested<CapBody>>>| {
            c.flatten()
                .map_or_else(Cap::default, |Nested(c)| Cap { tokens: c.tokens.flatten(), cost: c.cost.flatten() })
        };
        Budgets { chat: cap(b.chat), day: cap(b.day), background_day: cap(b.background_day) }
    }
}
