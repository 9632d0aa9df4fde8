//! `LlmRuntime`: the live settings and one client per ready provider. A turn leases a client
//! (`Arc`) for all of its iterations, so saving new credentials mid-turn never switches a
//! running turn; the old client is dropped with its last lease. Remembers the last
//! (provider, model) selection for Dream. Shared by the HTTP thread and workers.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::client::{LlmClient, LlmError};
use super::settings::{self, Settings};
use super::Provider;
use crate::secrets::Secrets;
use crate::util::sync;

struct State {
    /// `Err` when llm.json failed to load at start-up (API reads answer 503). The one copy of
    /// the key the server keeps; the clients share it.
    settings: Result<Arc<Settings>, ()>,
    clients: Vec<Arc<LlmClient>>,
    last: Option<(Provider, String)>,
}

pub struct LlmRuntime {
    path: PathBuf,
    timeout: Duration,
    state: RwLock<State>,
    /// Told the stored API key whenever settings are installed.
    secrets: Secrets,
    /// Where every client records its requests (and checks the budgets).
    ledger: crate::ledger::Shared,
}

impl LlmRuntime {
    /// Loads llm.json (after the legacy migration); never fails start-up.
    pub fn load(path: PathBuf, timeout: Duration, legacy_key: Option<&str>, legacy_base: Option<&str>) -> LlmRuntime {
        match settings::migrate_legacy(&path, legacy_key, legacy_base) {
            Ok(true) => log::info!("event=llm.settings.migrated source=DEEPSEEK_API_KEY"),
            Ok(false) => {}
            Err(e) => log::warn!("event=llm.settings.migration_failed error_kind={:?}", e.kind()),
        }
        let settings = match settings::load(&path) {
            Ok(s) => Ok(s.unwrap_or_default()),
            Err(e) => {
                log::warn!("event=llm.settings.load_failed error=\"{e}\"");
                Err(())
            }
        };
        let rt = LlmRuntime {
            path,
            timeout,
            state: RwLock::new(State { settings: Ok(Arc::default()), clients: Vec::new(), last: None }),
            secrets: Secrets::new(),
            ledger: None,
        };
        match settings {
            Ok(s) => rt.install(s),
            Err(()) => rt.write().settings = Err(()),
        }
        rt
    }

    /// Shares `secrets` (the server's registry) and tells it the current key; every later
    /// save updates it.
    pub(crate) fn with_secrets(mut self, secrets: Secrets) -> LlmRuntime {
        self.secrets = secrets;
        if let Some(s) = self.settings() {
            self.publish_key(&s);
        }
        self
    }

    /// Every client (now and after each save) records its requests in `ledger`.
    pub(crate) fn with_ledger(mut self, ledger: Arc<crate::ledger::Ledger>) -> LlmRuntime {
        self.ledger = Some(ledger);
        if let Some(s) = self.settings() {
            self.install(s);
        }
        self
    }

    /// The ledger, when the server keeps one.
    pub(crate) fn ledger(&self) -> Option<&Arc<crate::ledger::Ledger>> {
        self.ledger.as_ref()
    }

    fn publish_key(&self, s: &Settings) {
        self.secrets.set("llm", [s.openai_api_key.clone()]);
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        sync::write(&self.state)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        sync::read(&self.state)
    }

    fn install(&self, s: Settings) {
        let s = Arc::new(s);
        let clients = Provider::ALL
            .iter()
            .filter_map(|p| LlmClient::new(&s, *p, self.timeout).map(|c| Arc::new(c.with_ledger(self.ledger.clone()))))
            .collect::<Vec<_>>();
        self.publish_key(&s);
        let mut st = self.write();
        if let Some((p, _)) = &st.last {
            if !clients.iter().any(|c| c.provider == *p) {
                st.last = None;
            }
        }
        st.settings = Ok(s);
        st.clients = clients;
    }

    /// Current settings, `None` if the file failed to load.
    pub(crate) fn settings(&self) -> Option<Settings> {
        self.read().settings.as_ref().ok().map(|s| Settings::clone(s))
    }

    /// Saves then installs `s`; on a write failure nothing changes.
    pub fn save(&self, s: Settings) -> std::io::Result<()> {
        settings::save(&self.path, &s)?;
        self.install(s);
        Ok(())
    }

    /// Leases the provider's client and records the selection.
    pub fn acquire(&self, provider: Provider, model: &str) -> Result<Arc<LlmClient>, LlmError> {
        let mut st = self.write();
        let c = st.clients.iter().find(|c| c.provider == provider).cloned().ok_or(LlmError::NotConfigured(provider))?;
        st.last = Some((provider, model.to_string()));
        Ok(c)
    }

    /// The installed client for `provider`, without recording a selection (discovery).
    pub(crate) fn client(&self, provider: Provider) -> Option<Arc<LlmClient>> {
        self.read().clients.iter().find(|c| c.provider == provider).cloned()
    }

    /// The last selection with its client (Dream).
    pub(crate) fn acquire_last(&self) -> Option<(Arc<LlmClient>, String)> {
        let st = self.read();
        let (p, m) = st.last.clone()?;
        st.clients.iter().find(|c| c.provider == p).cloned().map(|c| (c, m))
    }

    /// Server stop: every installed client's background calls fail at once (see
    /// [`LlmClient::shutdown`]).
    pub(crate) fn shutdown(&self) {
        for c in &self.read().clients {
            c.shutdown();
        }
    }
}
