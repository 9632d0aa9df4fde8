//! `/api/settings/llm` (docs/llm-settings.md §4): public view, save, connection test, discovery.
//! The API key never leaves this module except into llm.json, and a stored key is reused only
//! for the origin it was entered for (`settings::build`; a moved endpoint gets a 422).

use std::thread;

use super::api::{only, Api};
use super::{Req, Resp};
use crate::llm::client::{LlmClient, DISCOVERY_TIMEOUT};
use crate::llm::settings::{self, InputError, Settings};
use crate::llm::views::{ModelsView, PublicView, TestView};
use crate::llm::Provider;

const UNREADABLE: &str = "the LLM settings file is invalid or unreadable";

pub(crate) fn route(api: &Api, m: &str, rest: &[&str], req: &Req) -> Resp {
    match rest {
        [] => match m {
            "GET" => get(api),
            "PUT" => put(api, req),
            _ => Resp::detail(405, "Method Not Allowed"),
        },
        ["test"] => only(m, &["POST"]).unwrap_or_else(|| test(api, req)),
        ["models"] => only(m, &["GET"]).unwrap_or_else(|| models(api)),
        _ => Resp::detail(404, "Not Found"),
    }
}

fn input_error(e: InputError) -> Resp {
    match e {
        InputError::Invalid(msg) => Resp::detail(422, &msg),
        InputError::Shape(items) => Resp::shape(items),
    }
}

fn get(api: &Api) -> Resp {
    match api.llm.settings() {
        Some(s) => Resp::ok(&PublicView::new(&s)),
        None => Resp::detail(503, UNREADABLE),
    }
}

fn draft(api: &Api, req: &Req, with_provider: bool) -> Result<(settings::Draft, Settings), Resp> {
    let body = req.json()?;
    let d = settings::parse_body(&body, with_provider).map_err(input_error)?;
    let mut stored = api.llm.settings().unwrap_or_default();
    // An Ollama probe needs no Generic API key: without it in the draft, an edited Generic
    // address cannot block the probe and the key is not at hand at all.
    if d.provider == Some(Provider::Ollama) {
        stored.openai_api_key.clear();
    }
    let s = settings::build(&d, &stored).map_err(input_error)?;
    Ok((d, s))
}

fn put(api: &Api, req: &Req) -> Resp {
    let (_, s) = match draft(api, req, false) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !s.configured() {
        return Resp::detail(422, "at least one provider connection is required");
    }
    match api.llm.save(s.clone()) {
        Ok(()) => {
            log::info!(
                "event=llm.settings.saved openai_ready={} ollama_ready={}",
                s.ready(Provider::OpenAiCompatible),
                s.ready(Provider::Ollama)
            );
            Resp::ok(&PublicView::new(&s))
        }
        Err(e) => {
            log::error!("event=llm.settings.save_failed error_kind={:?}", e.kind());
            Resp::detail(503, "unable to save the LLM settings file")
        }
    }
}

fn test(api: &Api, req: &Req) -> Resp {
    let (d, s) = match draft(api, req, true) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let provider = d.provider.unwrap_or(Provider::OpenAiCompatible);
    let Some(client) = LlmClient::new(&std::sync::Arc::new(s), provider, DISCOVERY_TIMEOUT) else {
        return Resp::detail(422, &format!("LLM not configured ({provider}); fill in the connection details first"));
    };
    match client.list_models() {
        Ok(models) => Resp::ok(&TestView::new(provider, models.len())),
        Err(e) => {
            log::warn!("event=llm.test.failed provider={provider} error=\"{e}\"");
            Resp::coded(400, e.category(), e.category_code())
        }
    }
}

fn models(api: &Api) -> Resp {
    let Some(s) = api.llm.settings() else {
        return Resp::detail(503, UNREADABLE);
    };
    // Probe every ready provider concurrently.
    let results: Vec<(Provider, bool, Result<Vec<String>, String>)> = thread::scope(|scope| {
        let handles: Vec<_> = Provider::ALL
            .iter()
            .map(|p| {
                let s = &s;
                scope.spawn(move || {
                    let ready = s.ready(*p);
                    // The installed client (its connections and TLS setup are reused);
                    // list_models bounds itself by the discovery timeout.
                    let r = match api.llm.client(*p).filter(|_| ready) {
                        Some(c) => c.list_models().map_err(|e| {
                            log::warn!("event=llm.discovery.failed provider={p} error=\"{e}\"");
                            e.category().to_string()
                        }),
                        None => Ok(Vec::new()),
                    };
                    (*p, ready, r)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    Resp::ok(&ModelsView::new(results))
}
