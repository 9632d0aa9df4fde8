// The official ACP TypeScript SDK's client driving `cashcode acp` (tests/suite/acp.rs runs it).
// Usage: node client.mjs <scenario> <workspace> <cashcode> [flags for `cashcode acp`...]
// Prints one JSON object per step on stdout; the Rust test checks them against the fake model
// it scripted and the files the turns left. Every message passes the SDK's own schema checks.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [scenario, workspace, bin, ...flags] = process.argv.slice(2);
const child = spawn(bin, ["acp", ...flags], { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const report = (step, value) => process.stdout.write(JSON.stringify({ step, ...value }) + "\n");

// Updates per session, in arrival order; the permission answer the current step wants.
const updates = [];
let answer = "allow_once";
const permissions = [];
const app = acp
  .client({ name: "cashcode-test-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    if (onUpdate) onUpdate(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    permissions.push({ title: params.toolCall.title, options: params.options.map((o) => o.optionId) });
    return { outcome: { outcome: "selected", optionId: answer } };
  });
let onUpdate = null;

function text(kind, from) {
  return updates
    .slice(from)
    .filter((u) => u.sessionUpdate === kind)
    .map((u) => u.content.text)
    .join("");
}

async function prompt(ctx, sessionId, words, step) {
  const from = updates.length;
  const res = await ctx.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: words }],
  });
  const mine = updates.slice(from);
  report(step, {
    stopReason: res.stopReason,
    answer: text("agent_message_chunk", from),
    thought: text("agent_thought_chunk", from),
    tools: mine.filter((u) => u.sessionUpdate === "tool_call").map((u) => ({ title: u.title, kind: u.kind })),
    usage: mine.filter((u) => u.sessionUpdate === "usage_update").map((u) => ({ used: u.used, size: u.size })),
    toolEnds: mine
      .filter((u) => u.sessionUpdate === "tool_call_update")
      .map((u) => ({ status: u.status, content: u.content })),
  });
  return res;
}

try {
  await app.connectWith(stream, async (ctx) => {
    const init = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "cashcode-test-client", version: "1" },
    });
    report("initialize", { protocolVersion: init.protocolVersion, capabilities: init.agentCapabilities });

    if (scenario === "outside") {
      try {
        await ctx.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [] });
        report("new", { ok: true });
      } catch (e) {
        report("new", { ok: false, code: e.code, message: e.message });
      }
      return;
    }

    if (scenario === "load") {
      const list = await ctx.request(acp.methods.agent.session.list, { cwd: workspace });
      report("list", { sessions: list.sessions });
      const sessionId = list.sessions[0].sessionId;
      await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: workspace, mcpServers: [] });
      report("load", {
        kinds: updates.map((u) => u.sessionUpdate),
        user: text("user_message_chunk", 0),
        answer: text("agent_message_chunk", 0),
      });
      try {
        await ctx.request(acp.methods.agent.session.load, { sessionId: "no-such-chat", cwd: workspace, mcpServers: [] });
      } catch (e) {
        report("load-missing", { code: e.code, message: e.message });
      }
      return;
    }

    const session = await ctx.request(acp.methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    const sessionId = session.sessionId;
    report("new", { sessionId, configOptions: session.configOptions });

    await prompt(ctx, sessionId, "say hello", "plain");
    await prompt(ctx, sessionId, "write a file", "tool");
    answer = "allow_once";
    await prompt(ctx, sessionId, "escalate once", "allow");
    answer = "reject_once";
    await prompt(ctx, sessionId, "escalate again", "reject");
    report("permissions", { permissions });
    await prompt(ctx, sessionId, "write at length", "cut");
    await prompt(ctx, sessionId, "say something filtered", "refused");

    // Cancel as soon as the answer starts streaming.
    const started = new Promise((resolve) => {
      onUpdate = (u) => {
        if (u.sessionUpdate === "agent_message_chunk") resolve();
      };
    });
    const pending = prompt(ctx, sessionId, "talk slowly", "cancel");
    await started;
    onUpdate = null;
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
    await pending;
  });
} catch (e) {
  report("failed", { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
} finally {
  child.stdin.end();
  await new Promise((resolve) => child.on("exit", (code) => resolve(report("exit", { code }))));
}
