//! The owner's price table and budgets (`<data>/usage_prices.json`, `<data>/usage_budgets.json`,
//! 0600): parsed strictly from `PUT /api/settings/prices|budgets`, held in memory, read by
//! the ledger's budget check and its reports. Cost is derived from tokens at read time.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

use crate::util::{fsx, sync, time};

/// Most price rows.
pub(crate) const MAX_PRICES: usize = 500;

/// Prices of one provider and model, per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Price {
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) input: f64,
    /// Cached input; the input price when absent.
    #[serde(default)]
    pub(crate) cached_input: Option<f64>,
    pub(crate) output: f64,
    pub(crate) currency: String,
}

impl Price {
    /// Cost of the tokens in this price's currency (`input` includes `cached`).
    pub(crate) fn cost(&self, input: u64, cached: u64, output: u64) -> f64 {
        let cached = cached.min(input);
        let fresh = (input - cached) as f64 * self.input;
        let cached = cached as f64 * self.cached_input.unwrap_or(self.input);
        (fresh + cached + output as f64 * self.output) / 1e6
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Prices {
    /// When the table was last saved (`YYYY-MM-DD`, local): the date costs are labelled with.
    #[serde(default)]
    pub(crate) updated: Option<String>,
    #[serde(default)]
    pub(crate) models: Vec<Price>,
}

impl Prices {
    pub(crate) fn find(&self, provider: &str, model: &str) -> Option<&Price> {
        self.models.iter().find(|p| p.provider == provider && p.model == model)
    }

    /// Cost of the tokens in the row's currency; `None` without a price.
    pub(crate) fn cost(&self, provider: &str, model: &str, input: u64, cached: u64, output: u64) -> Option<f64> {
        Some(self.find(provider, model)?.cost(input, cached, output))
    }

    fn check(&self) -> Result<(), String> {
        if self.models.len() > MAX_PRICES {
            return Err(format!("at most {MAX_PRICES} price rows"));
        }
        for p in &self.models {
            let nums = [Some(p.input), p.cached_input, Some(p.output)];
            if nums.iter().flatten().any(|n| !n.is_finite() || *n < 0.0 || *n > 1e6) {
                return Err(format!("prices of {:?} must be numbers from 0 to 1000000", p.model));
            }
            let name_ok = |s: &str| !s.trim().is_empty() && s.len() <= 256;
            if !name_ok(&p.provider) || !name_ok(&p.model) {
                return Err("each price needs a provider and a model (at most 256 bytes)".into());
            }
            let cur = p.currency.trim();
            if cur.is_empty() || cur.len() > 8 || !cur.chars().all(|c| c.is_ascii_alphabetic()) {
                return Err(format!("currency of {:?} must be a code such as USD or CNY", p.model));
            }
        }
        Ok(())
    }
}

/// One cap: tokens (input + output) and/or cost (in the price table's currencies summed);
/// `None` = no cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Cap {
    #[serde(default)]
    pub(crate) tokens: Option<u64>,
    #[serde(default)]
    pub(crate) cost: Option<f64>,
}

impl Cap {
    pub(crate) fn is_set(&self) -> bool {
        self.tokens.is_some() || self.cost.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Budgets {
    #[serde(default)]
    pub(crate) chat: Cap,
    #[serde(default)]
    pub(crate) day: Cap,
    #[serde(default)]
    pub(crate) background_day: Cap,
}

impl Budgets {
    fn check(&self) -> Result<(), String> {
        for c in [self.chat, self.day, self.background_day] {
            if c.cost.is_some_and(|n| !n.is_finite() || n < 0.0) {
                return Err("a cost cap must be a number of at least 0, or null".into());
            }
        }
        Ok(())
    }
}

/// What one budget has counted so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spend {
    /// `chat`, `day` or `background_day`.
    pub(crate) budget: &'static str,
    pub(crate) tokens: u64,
    pub(crate) cost: f64,
    pub(crate) cap: Cap,
}

impl Spend {
    /// The largest share of its caps spent (1.0 = reached).
    pub(crate) fn share(&self) -> f64 {
        let t = self.cap.tokens.map_or(0.0, |c| if c == 0 { f64::INFINITY } else { self.tokens as f64 / c as f64 });
        let m = self.cap.cost.map_or(0.0, |c| if c <= 0.0 { f64::INFINITY } else { self.cost / c });
        t.max(m)
    }

    fn what(&self) -> &'static str {
        match self.budget {
            "chat" => "this chat's budget",
            "day" => "today's budget",
            _ => "today's budget for background jobs",
        }
    }

    /// The fields of a refusal's code (`budget_reached`), for a client to word it.
    pub(crate) fn fields(&self) -> serde_json::Value {
        serde_json::json!({
            "budget": self.budget,
            "tokens": self.tokens,
            "cap_tokens": self.cap.tokens,
            "cost": self.cost,
            "cap_cost": self.cap.cost,
        })
    }

    /// The detail of the error a refused request ends its turn with.
    pub(crate) fn refusal(&self) -> String {
        let mut spent = format!("{} tokens", self.tokens);
        if let Some(c) = self.cap.tokens {
            spent = format!("{} of {c} tokens", self.tokens);
        }
        if let Some(c) = self.cap.cost {
            spent.push_str(&format!(", cost {:.4} of {c}", self.cost));
        }
        format!(
            "Budget reached: {} ({spent}). No model request was made. Raise or clear the \"{}\" cap in Settings > \
Usage (or PUT /api/settings/budgets), then send the message again.",
            self.what(),
            self.budget
        )
    }
}

/// Start of today (local) in epoch milliseconds.
pub(crate) fn day_start(now_ms: u64) -> u64 {
    let t = time::local((now_ms / 1000) as i64);
    let into = u64::from(t.hour * 3600 + t.minute * 60 + t.second) * 1000 + now_ms % 1000;
    now_ms.saturating_sub(into)
}

pub(crate) struct Limits {
    prices_path: PathBuf,
    budgets_path: PathBuf,
    prices: RwLock<Prices>,
    budgets: RwLock<Budgets>,
}

fn read<T: for<'de> Deserialize<'de> + Default>(path: &Path) -> T {
    match std::fs::read(path) {
        Ok(b) if b.len() <= 1024 * 1024 => serde_json::from_slice(&b).unwrap_or_else(|e| {
            log::warn!("event=usage.settings_unreadable file={:?} error=\"{e}\"", path.file_name());
            T::default()
        }),
        _ => T::default(),
    }
}

impl Limits {
    pub(crate) fn load(data_dir: &Path) -> Limits {
        let prices_path = data_dir.join("usage_prices.json");
        let budgets_path = data_dir.join("usage_budgets.json");
        Limits {
            prices: RwLock::new(read(&prices_path)),
            budgets: RwLock::new(read(&budgets_path)),
            prices_path,
            budgets_path,
        }
    }

    pub(crate) fn prices(&self) -> Prices {
        sync::read(&self.prices).clone()
    }

    pub(crate) fn budgets(&self) -> Budgets {
        *sync::read(&self.budgets)
    }

    /// Checks, dates and saves the table; `Err` is the message for a 422 (or 503).
    pub(crate) fn set_prices(&self, mut p: Prices) -> Result<Prices, (u16, String)> {
        p.check().map_err(|m| (422, m))?;
        for row in &mut p.models {
            row.currency = row.currency.trim().to_ascii_uppercase();
        }
        p.updated = Some(time::local_date(time::now_epoch() as i64));
        let bytes = serde_json::to_vec_pretty(&p).expect("prices serialise");
        fsx::write_atomic(&self.prices_path, &bytes, true)
            .map_err(|_| (503, "unable to save the price table".into()))?;
        *sync::write(&self.prices) = p.clone();
        Ok(p)
    }

    pub(crate) fn set_budgets(&self, b: Budgets) -> Result<Budgets, (u16, String)> {
        b.check().map_err(|m| (422, m))?;
        let bytes = serde_json::to_vec_pretty(&b).expect("budgets serialise");
        fsx::write_atomic(&self.budgets_path, &bytes, true).map_err(|_| (503, "unable to save the budgets".into()))?;
        *sync::write(&self.budgets) = b;
        Ok(b)
    }
}
