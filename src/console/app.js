// The operator console: one page per hash (#overview, #upstreams, ...),
// every value from this admin listener's own JSON endpoints, written into
// the page as text (never as HTML), so nothing a tool server publishes can
// run here. Every request sends the admin token typed above: with
// [server] admin_token the listener answers nothing but this page without
// it (a loopback listener without one answers reads, and has no actions).
"use strict";

const tokenInput = document.getElementById("admin-token");
tokenInput.value = sessionStorage.getItem("otc-admin-token") || "";
document.getElementById("token-form").addEventListener("submit", (e) => e.preventDefault());
tokenInput.addEventListener("change", () => {
  sessionStorage.setItem("otc-admin-token", tokenInput.value);
  show();
});

if (document.documentElement.getAttribute("data-inline-script") === "ran") {
  document.getElementById("csp-warning").hidden = false;
}

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function table(headers, rows) {
  return el("table", {}, el("tr", {}, headers.map((h) => el("th", {}, h))),
    rows.map((row) => el("tr", {}, row.map((cell) => el("td", {}, cell)))));
}

function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
}

function adminHeaders() {
  return tokenInput.value ? { authorization: "Bearer " + tokenInput.value } : {};
}

/** A request with the admin token: its status and JSON body. */
async function getJson(path, options) {
  const headers = { ...adminHeaders(), ...((options || {}).headers || {}) };
  const response = await fetch(path, { ...options, headers });
  const text = await response.text();
  let body;
  try { body = JSON.parse(text); } catch { body = { message: text }; }
  return { ok: response.ok, status: response.status, body };
}

/** The listener refused to let this page read (no token, a wrong one). */
class Refused extends Error {
  constructor(answer) {
    super(`${answer.status}: ${answer.body.message}`);
    this.status = answer.status;
  }
}

/** A read a page needs: its answer, or `Refused` for the page to say so. */
async function read(path, options) {
  const answer = await getJson(path, options);
  if (answer.status === 401 || answer.status === 403) throw new Refused(answer);
  return answer;
}

const pages = {
  async overview() {
    const [status, calls] = await Promise.all([read("/status"), read("/calls")]);
    const s = status.body;
    const up = s.upstreams.filter((u) => u.up).length;
    const now = Date.now();
    const lastMinutes = calls.body.calls.filter((c) => now - c.at_ms <= 5 * 60 * 1000);
    const lastMinute = calls.body.calls.filter((c) => now - c.at_ms <= 60 * 1000);
    const errors = lastMinutes.filter((c) => c.status >= 500 || c.outcome === "server_error").length;
    const durations = lastMinutes.map((c) => c.duration_ms).sort((a, b) => a - b);
    const p99 = durations.length ? durations[Math.min(durations.length - 1, Math.floor(durations.length * 0.99))] : 0;
    const reload = s.last_reload;
    return [
      el("h1", {}, "Overview"),
      el("div", { class: "cards" },
        el("div", { class: "card", id: "generation" }, el("b", {}, s.generation), "config generation"),
        el("div", { class: "card" }, el("b", {}, `${up} / ${s.upstreams.length}`), "upstreams up"),
        el("div", { class: "card", id: "tool-count" }, el("b", {}, s.tools), "tools"),
        el("div", { class: "card" }, el("b", {}, (lastMinute.length / 60).toFixed(2)), "calls per second (last minute)"),
        el("div", { class: "card" }, el("b", {}, lastMinutes.length ? ((100 * errors) / lastMinutes.length).toFixed(1) + " %" : "0 %"), "errors (last 5 minutes)"),
        el("div", { class: "card" }, el("b", {}, p99.toFixed(1) + " ms"), "p99 (last 5 minutes)")),
      el("p", {}, "Last reload: ", reload ? [new Date(reload.at * 1000).toISOString(), " ",
        el("span", { class: reload.ok ? "ok" : "bad" }, reload.ok ? "applied" : "refused: " + reload.error)] : "none since start"),
      s.security_warnings.length ? el("div", {}, el("h2", {}, "Security warnings"), el("ul", {}, s.security_warnings.map((w) => el("li", { class: "bad" }, w)))) : null,
      s.policy_warnings.length ? el("div", {}, el("h2", {}, "Policy patterns matching no tool"), el("ul", {}, s.policy_warnings.map((w) => el("li", {}, w)))) : null,
      el("p", {}, "Figures over the most recent calls the gateway keeps (", calls.body.calls.length, " of ", calls.body.total, " since start); the full counters are on ", el("a", { href: "/metrics" }, "/metrics"), "."),
    ];
  },

  async upstreams() {
    const s = (await read("/status")).body;
    return [
      el("h1", {}, "Upstreams"),
      table(["name", "health", "MCP revision", "last fetch", "last error", "tools", "skipped", "granted"],
        s.upstreams.map((u) => [
          u.name,
          el("span", { class: u.up ? "ok" : "bad" }, u.up ? "up" : "down"),
          u.mcp_protocol_version || "",
          u.last_fetch ? when(u.last_fetch * 1000) : "never",
          u.last_error ? el("span", { class: "bad" }, u.last_error) : "",
          u.tools,
          (u.skipped || []).map((k) => el("div", {}, typeof k === "string" ? k : JSON.stringify(k))),
          ["secrets: ", u.granted.secrets.join(", ") || "none", el("br"), "authorization: ", u.granted.authorization.join(", ") || "none",
            el("br"), "toolkits: ", u.granted.toolkits.join(", ") || "none"],
        ])),
      s.ungranted.length ? [el("h2", {}, "Requirements not granted"), el("pre", {}, JSON.stringify(s.ungranted, null, 2))] : null,
    ];
  },

  async catalog(params) {
    const q = params.get("q") || "";
    const [status, listing] = await Promise.all([read("/status"), q ? read("/tools/search?q=" + encodeURIComponent(q)) : read("/tools")]);
    const form = el("form", { id: "search", onsubmit: (e) => { e.preventDefault(); location.hash = "catalog?q=" + encodeURIComponent(e.target.q.value); } },
      el("label", {}, "Search ", el("input", { type: "text", name: "q", value: q })), el("button", { type: "submit" }, "Search"));
    const s = status.body;
    return [
      el("h1", {}, "Catalog"), form,
      listing.ok ? table(["tool", "description", "schema"], listing.body.items.map((t) => [
        el("code", { class: "tool-id" }, t.id), t.description || "",
        el("details", {}, el("summary", {}, "input schema"), el("pre", {}, JSON.stringify(t.input_schema, null, 2))),
      ])) : el("p", { class: "bad" }, listing.body.message),
      s.conflicts.length ? [el("h2", {}, "Conflicts"), el("pre", {}, JSON.stringify(s.conflicts, null, 2))] : null,
      s.refused_tools.length ? [el("h2", {}, "Refused tools"), el("pre", {}, JSON.stringify(s.refused_tools, null, 2))] : null,
      (s.servers || []).length ? [el("h2", {}, "Virtual servers"), table(["server", "tools", "problems"], s.servers.map((v) => [
        el("code", {}, `/servers/${v.name}/mcp`),
        el("ul", {}, v.served.map((t) => el("li", {}, el("code", { class: "tool-id" }, t.id), t.id === t.of ? "" : ` (${t.of})`))),
        [...v.unmatched_patterns.map((p) => `pattern ${p} matches no tool`), ...v.absent_tools.map((t) => `${t} is not in the catalog`),
          ...v.rename_collisions.map((c) => `${c.hidden} hidden: ${c.served} is renamed ${c.name}`),
          ...v.fixed_problems.map((p) => `${p.tool}: fixed ${p.argument}: ${p.problem}`)].join("; ") || "none",
      ]))] : null,
      s.mcp_name_conflicts.length ? [el("h2", {}, "MCP name clashes"), table(["MCP name", "held by", "not served on MCP", "why"],
        s.mcp_name_conflicts.map((c) => [el("code", {}, c.name), el("code", {}, c.served), el("code", {}, c.hidden), c.reason]))] : null,
    ];
  },

  async explain(params) {
    const fields = ["user_id", "claims", "jwt", "tool"];
    const form = el("form", { id: "explain-form", onsubmit: (e) => {
      e.preventDefault();
      const query = new URLSearchParams();
      for (const f of fields.filter((f) => f !== "jwt")) if (e.target[f].value) query.set(f, e.target[f].value);
      if (e.target.jwt.value) sessionStorage.setItem("otc-explain-jwt", e.target.jwt.value);
      else sessionStorage.removeItem("otc-explain-jwt");
      location.hash = "explain?" + query.toString() + "&run=1";
    } },
      el("label", {}, "User id ", el("input", { type: "text", name: "user_id", value: params.get("user_id") || "" })),
      el("label", {}, "Claims (JSON) ", el("input", { type: "text", name: "claims", value: params.get("claims") || "" })),
      el("label", {}, "or a JWT (decoded here, not verified; never put in the URL) ", el("input", { type: "text", name: "jwt", value: "" })),
      el("label", {}, "Tool ", el("input", { type: "text", name: "tool", value: params.get("tool") || "", placeholder: "Toolkit.Name, Toolkit.Name@1.0.0 or its MCP name Toolkit_Name" })),
      el("button", { type: "submit" }, "Explain"));
    if (!params.get("run")) return [el("h1", {}, "Explain"), form];
    const asked = {};
    for (const f of ["user_id", "tool"]) if (params.get(f)) asked[f] = params.get(f);
    if (params.get("claims")) {
      try { asked.claims = JSON.parse(params.get("claims")); } catch { return [el("h1", {}, "Explain"), form, el("p", { class: "bad" }, "claims: not JSON")]; }
    }
    const jwt = sessionStorage.getItem("otc-explain-jwt");
    if (jwt) asked.jwt = jwt;
    const answer = await read("/explain", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(asked) });
    if (!answer.ok) return [el("h1", {}, "Explain"), form, el("p", { class: "bad" }, answer.body.message)];
    const e = answer.body;
    const r = e.resolution;
    return [
      el("h1", {}, "Explain"), form,
      el("p", { id: "explained-caller" }, "Caller: ", e.caller.user_id || "anonymous", " (", e.caller.kind, "); policies that apply: ", e.caller.policies.join(", ") || "none"),
      el("h2", {}, `Visible (${e.visible.length})`), el("ul", { id: "visible" }, e.visible.map((t) => el("li", {}, t))),
      el("h2", {}, `Hidden (${e.hidden.length})`),
      table(["tool", "why"], e.hidden.map((h) => [h.tool, h.policy ? `denied by policy "${h.policy}" (pattern "${h.pattern}")` : "no policy allows it"])),
      r ? [el("h2", {}, "Resolution"), el("p", { id: "resolution" }, r.tool_id || "does not resolve", r.upstream ? " → " + r.upstream : "", ": ", r.why)] : null,
      e.requirements.length ? [el("h2", {}, "Requirements"), table(["kind", "id", "met", "why"],
        e.requirements.map((q) => [q.kind, q.id, el("span", { class: q.met ? "ok" : "bad" }, q.met ? "met" : "not met"), q.why]))] : null,
      e.rate_limits.length ? [el("h2", {}, "Rate limits"), table(["limit", "calls left", "full again in"],
        e.rate_limits.map((l) => [l.name, l.remaining === null ? "unknown (Redis did not answer)" : l.remaining, l.reset_ms === null ? "" : l.reset_ms + " ms"]))] : null,
    ];
  },

  async calls() {
    const c = (await read("/calls")).body;
    return [
      el("h1", {}, "Calls"),
      el("p", {}, `The ${c.calls.length} most recent of ${c.total} calls since start (the gateway keeps ${c.capacity}); never their inputs or outputs.`),
      table(["time", "caller", "tool", "upstream", "status", "outcome", "duration", "call_id"],
        c.calls.map((call) => [when(call.at_ms), call.caller || "anonymous", call.tool, call.upstream, call.status,
          el("span", { class: call.outcome === "success" ? "ok" : "bad" }, call.outcome), call.duration_ms.toFixed(1) + " ms",
          el("code", {}, call.call_id)])),
    ];
  },

  async grants() {
    const result = el("div", { id: "grant-result" });
    const listing = await read("/grants");
    if (!listing.ok) return [el("h1", {}, "Grants"), el("p", { class: "bad" }, listing.body.message)];
    const revoke = (provider, user) => async () => {
      if (!confirm(`Revoke ${user}'s grant at ${provider}?`)) return;
      const answer = await getJson(`/grants/${encodeURIComponent(provider)}/${encodeURIComponent(user)}`, { method: "DELETE" });
      result.replaceChildren(el("p", { class: answer.ok ? "result ok" : "result bad" },
        answer.ok ? (answer.body.revoked ? `Revoked ${user}'s grant at ${provider}.` : `${user} held no grant at ${provider}.`) : `${answer.status}: ${answer.body.message}`));
      if (answer.ok) document.getElementById("grants-of-" + provider)?.querySelector(`tr[data-user="${CSS.escape(user)}"]`)?.remove();
    };
    const providers = listing.body.providers;
    return [el("h1", {}, "Grants"),
      el("p", {}, "Who holds a grant at each managed provider: scopes and times, never a token. ",
        tokenInput.value ? "Revoke forgets a grant here and revokes it at the provider; it asks first." : "Read-only: type the admin token above to revoke."),
      result,
      providers.length ? null : el("p", {}, "No managed provider is configured ([authorization.<provider>] with an issuer)."),
      providers.map((p) => [
        el("h2", {}, p.provider),
        p.error ? el("p", { class: "bad" }, "The grant store could not be listed: " + p.error) : null,
        p.grants.length ? el("table", { id: "grants-of-" + p.provider },
          el("tr", {}, ["user", "scopes", "connected at", "token expires", "last refreshed", ""].map((h) => el("th", {}, h))),
          p.grants.map((g) => el("tr", { "data-user": g.user_id },
            el("td", {}, g.user_id), el("td", {}, g.scopes.join(" ")),
            el("td", {}, g.connected_at ? when(g.connected_at * 1000) : "not recorded"),
            el("td", {}, g.expires_at ? when(g.expires_at * 1000) : "not said"),
            el("td", {}, g.refreshed_at ? when(g.refreshed_at * 1000) : (g.refreshable ? "never" : "never (no refresh token)")),
            el("td", {}, el("button", { class: "revoke", disabled: !tokenInput.value, onclick: revoke(p.provider, g.user_id) }, "Revoke")))))
          : (p.error ? null : el("p", {}, "Nobody holds a grant here.")),
      ]),
    ];
  },

  async changes(params) {
    const state = params.get("state") || "pending";
    const listing = await read("/changes?state=" + encodeURIComponent(state));
    if (!listing.ok) return [el("h1", {}, "Changes"), el("p", { class: "bad" }, listing.body.message)];
    const result = el("div", { id: "change-result" });
    const decide = (change, verdict) => async () => {
      if (!confirm(`${verdict === "approve" ? "Approve" : "Reject"} the ${change.kind} definition of ${change.tool}?`)) return;
      const answer = await getJson(`/changes/${encodeURIComponent(change.id)}/${verdict}`,
        { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ by: "console" }) });
      result.replaceChildren(el("p", { class: answer.ok ? "result ok" : "result bad" },
        answer.ok ? `${change.tool}: ${answer.body.state}.` : `${answer.status}: ${answer.body.message}`));
      if (answer.ok) document.getElementById("change-" + change.id)?.remove();
    };
    const states = ["pending", "approved", "rejected", "all"].map((s) =>
      el("a", { href: "#changes?state=" + s, class: s === state ? "current" : null }, s));
    return [el("h1", {}, "Changes"),
      el("p", {}, "Tool definitions that changed after clients saw them, and new ones the scan flagged. ",
        "Clients keep the approved definition until a change is approved. ", states),
      tokenInput.value ? null : el("p", {}, "Read-only: type the admin token above to approve or reject."),
      result,
      listing.body.changes.length ? null : el("p", { id: "no-changes" }, `No ${state === "all" ? "" : state + " "}changes.`),
      listing.body.changes.map((change) => el("section", { class: "change", id: "change-" + change.id },
        el("h2", {}, el("code", {}, change.tool), ` from ${change.upstream}: ${change.kind}, ${change.state}`),
        el("p", {}, "Seen ", when(change.seen_at * 1000),
          change.decided_by ? `; ${change.state} by ${change.decided_by} at ${when(change.decided_at * 1000)}` : ""),
        change.findings.length ? table(["found", "where", "what"], change.findings.map((f) =>
          [el("span", { class: "bad" }, f.kind), el("code", {}, f.field), f.excerpt])) : el("p", {}, "The scan found nothing."),
        sideBySide(change.approved, change.proposed),
        change.state === "pending" ? el("p", {},
          el("button", { class: "approve", disabled: !tokenInput.value, onclick: decide(change, "approve") }, "Approve"), " ",
          el("button", { class: "reject", disabled: !tokenInput.value, onclick: decide(change, "reject") }, "Reject")) : null)),
    ];
  },

  async approvals(params) {
    const state = params.get("state") || "pending";
    const listing = await read("/approvals?state=" + encodeURIComponent(state));
    if (!listing.ok) return [el("h1", {}, "Approvals"), el("p", { class: "bad" }, listing.body.message)];
    const result = el("div", { id: "approval-result" });
    const decide = (held, verdict) => async () => {
      if (!confirm(`${verdict === "approve" ? "Approve" : "Deny"} this call of ${held.tool}?`)) return;
      const answer = await getJson(`/approvals/${encodeURIComponent(held.id)}/${verdict}`,
        { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ by: "console" }) });
      result.replaceChildren(el("p", { class: answer.ok ? "result ok" : "result bad" },
        answer.ok ? `${held.tool}: ${answer.body.state}.` : `${answer.status}: ${answer.body.message}`));
      if (answer.ok) document.getElementById("approval-" + held.id)?.remove();
    };
    const states = ["pending", "approved", "denied", "expired", "all"].map((s) =>
      el("a", { href: "#approvals?state=" + s, class: s === state ? "current" : null }, s));
    return [el("h1", {}, "Approvals"),
      el("p", {}, "Calls an [[approval]] rule held. An operator decides the rules with approver = \"admin\"; ",
        "the calling user decides the others, in their own browser. ", states),
      tokenInput.value ? null : el("p", {}, "Read-only: type the admin token above to approve or deny."),
      result,
      listing.body.approvals.length ? null : el("p", { id: "no-approvals" }, `No ${state === "all" ? "" : state + " "}approvals.`),
      listing.body.approvals.map((held) => el("section", { class: "approval", id: "approval-" + held.id },
        el("h2", {}, el("code", {}, held.tool), ` on ${held.upstream}: ${held.state}`),
        table(["caller", "rule", "decided by", "call id", "asked", "expires"], [[held.caller || "anonymous", held.rule,
          held.approver, held.call_id || "(none)", when(held.requested_at * 1000), when(held.expires_at * 1000)]]),
        held.decision ? el("p", {}, `${held.state} by ${held.decision.by} at ${when(held.decision.at * 1000)}`,
          held.used_at ? `; ran at ${when(held.used_at * 1000)}` : "") : null,
        el("pre", { class: "input" }, JSON.stringify(held.input, null, 2)),
        held.state === "pending" && held.approver === "admin" ? el("p", {},
          el("button", { class: "approve", disabled: !tokenInput.value, onclick: decide(held, "approve") }, "Approve"), " ",
          el("button", { class: "deny", disabled: !tokenInput.value, onclick: decide(held, "deny") }, "Deny")) : null)),
    ];
  },

  async actions() {
    const result = el("div", { id: "action-result" });
    const reload = el("button", { id: "reload", disabled: !tokenInput.value, onclick: async () => {
      if (!confirm("Reload the config file now?")) return;
      const answer = await getJson("/reload", { method: "POST" });
      result.replaceChildren(el("p", { class: answer.ok ? "result ok" : "result bad" },
        answer.ok ? `Reloaded: generation ${answer.body.generation}.` : `${answer.status}: ${answer.body.error || answer.body.message}`));
    } }, "Reload the config");
    return [el("h1", {}, "Actions"),
      el("p", {}, tokenInput.value ? "Each action asks for confirmation first." : "Read-only: type the admin token above to enable actions."),
      reload, result];
  },
};

/** Two definitions side by side, line by line (their JSON), the lines
 * that differ marked: a longest common subsequence of the lines. */
function sideBySide(approved, proposed) {
  const left = approved ? JSON.stringify(approved, null, 2).split("\n").slice(0, 2000) : [];
  const right = JSON.stringify(proposed, null, 2).split("\n").slice(0, 2000);
  const common = Array.from({ length: left.length + 1 }, () => new Uint16Array(right.length + 1));
  for (let i = left.length - 1; i >= 0; i--) {
    for (let j = right.length - 1; j >= 0; j--) {
      common[i][j] = left[i] === right[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const rows = [];
  let i = 0, j = 0;
  while (i < left.length || j < right.length) {
    if (i < left.length && j < right.length && left[i] === right[j]) rows.push([left[i++], right[j++], "same"]);
    else if (j < right.length && (i === left.length || common[i][j + 1] >= common[i + 1][j])) rows.push(["", right[j++], "added"]);
    else rows.push([left[i++], "", "removed"]);
  }
  return el("table", { class: "diff" },
    el("tr", {}, el("th", {}, approved ? "approved (shown to clients now)" : "approved: none (a new tool)"), el("th", {}, "proposed")),
    rows.map(([a, b, kind]) => el("tr", { class: kind }, el("td", {}, el("pre", {}, a)), el("td", {}, el("pre", {}, b)))));
}

// Renders race (a hash change while a page's data loads): only the latest
// one writes the page.
let rendering = 0;

async function show() {
  const mine = ++rendering;
  const [name, query] = (location.hash.slice(1) || "overview").split("?");
  const page = pages[name] ? name : "overview";
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.getAttribute("href") === "#" + page);
  const main = document.getElementById("page");
  try {
    const nodes = [await pages[page](new URLSearchParams(query || ""))].flat(Infinity).filter((n) => n);
    if (mine !== rendering) return;
    main.replaceChildren(...nodes);
    main.setAttribute("data-page", page);
  } catch (error) {
    if (mine !== rendering) return;
    if (error instanceof Refused) {
      const hint = tokenInput.value ? "The admin token typed above is not this gateway's."
        : "Type the admin token above (press Enter) to see this page.";
      main.replaceChildren(el("h1", {}, error.status === 401 ? "Admin token needed" : "Refused"),
        el("p", { class: "bad", id: "refused" }, error.message), el("p", {}, error.status === 401 ? hint : ""));
      main.setAttribute("data-page", "refused");
    } else {
      main.replaceChildren(el("p", { class: "bad" }, "Could not load this page: " + error));
    }
  }
}

window.addEventListener("hashchange", show);
show();
