//! `/api/usage`, `/api/usage/records`, `/api/settings/prices` and `/api/settings/budgets`
//! (docs/usage.md): the ledger's reports and the owner's price table and budgets. Runs on
//! the HTTP thread; the ledger's lock is held only for a scan.

use super::api::{only, Api};
use super::{Req, Resp};
use crate::ledger::report::{self, GroupBy};
use crate::ledger::{Budgets, Ledger, Prices};

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
        "PUT" => match req.json().and_then(|v| {
            serde_json::from_value::<Prices>(v).map_err(|e| Resp::detail(422, &format!("invalid price table: {e}")))
        }) {
            Ok(p) => saved(l.limits.set_prices(p)),
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
        "PUT" => match req.json().and_then(|v| {
            serde_json::from_value::<Budgets>(v).map_err(|e| Resp::detail(422, &format!("invalid budgets: {e}")))
        }) {
            Ok(b) => saved(l.limits.set_budgets(b)),
            Err(r) => r,
        },
        _ => Resp::detail(405, "Method Not Allowed"),
    }
}
