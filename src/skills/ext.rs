//! The Skills turn extension: explicit selection (`mentioned_skills` and a leading `@name`)
//! loaded before the first model call, the skill tools on every model call, the recent-skills
//! prompt hint, and skill evolution scheduled after each persisted turn. Runs on turn workers.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::evolution::{Evolution, Generator, TurnTrace};
use super::mention::{leading_mention, selected_skills};
use super::tools::SkillTools;
use crate::bus::TurnRequest;
use crate::tool::{FinishedTurn, Preparation, Tool, TurnCtx, TurnExtension, TurnState};

pub(crate) struct SkillsExtension {
    pub(crate) tools: Arc<SkillTools>,
    pub(crate) evolution: Arc<Evolution>,
    /// Timeout of the evolution generator's LLM call.
    pub(crate) llm_timeout: Duration,
    visible: Vec<Arc<dyn Tool>>,
}

impl SkillsExtension {
    pub(crate) fn new(tools: Arc<SkillTools>, evolution: Arc<Evolution>, llm_timeout: Duration) -> SkillsExtension {
        let visible = tools.tools();
        SkillsExtension { tools, evolution, llm_timeout, visible }
    }
}

impl TurnExtension for SkillsExtension {
    fn prepare(&self, req: &TurnRequest, ctx: &TurnCtx, prep: &mut Preparation) -> Result<(), String> {
        self.tools.begin_turn(&ctx.chat_id);
        let mentioned: Vec<String> = req
            .selection
            .mentioned_skills
            .iter()
            .filter_map(|v| v.get("name").and_then(Value::as_str))
            .map(|s| s.trim().to_string())
            .collect();
        if let Some((_, task)) = leading_mention(&req.content) {
            if !task.is_empty() {
                prep.model_content = Some(task);
            }
        }
        let names = selected_skills(&mentioned, &req.content);
        if names.is_empty() {
            return Ok(());
        }
        let (bodies, receipts) = self.tools.explicit(ctx, &names)?;
        prep.system_bodies.extend(bodies);
        prep.receipts.extend(receipts);
        Ok(())
    }

    fn tools(&self, _state: &TurnState) -> Vec<Arc<dyn Tool>> {
        self.visible.clone()
    }

    fn hints(&self, metadata: &Map<String, Value>) -> Option<String> {
        self.tools.hints(metadata)
    }

    fn finished(&self, turn: &FinishedTurn) {
        self.tools.end_turn(&turn.req.chat_id);
        if turn.cancelled {
            return;
        }
        let trace = TurnTrace::from_records(&turn.req.chat_id, turn.records, turn.hit_limit);
        if !self.evolution.gate(&trace) {
            return;
        }
        let client = Arc::clone(turn.client);
        let model = turn.req.selection.model.clone();
        let job = crate::ledger::Job::new("skill_evolution", Some(&turn.req.chat_id));
        let timeout = self.llm_timeout;
        let generator: Arc<Generator> = Arc::new(move |msgs: &[Value]| {
            client.complete(&job, &model, msgs.to_vec(), timeout).map_err(|e| e.to_string())
        });
        self.evolution.schedule_turn(trace, generator);
    }
}
