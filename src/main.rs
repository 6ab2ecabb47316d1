//! The `otc-gateway` command: run, check a config, run the demo, ask a
//! running gateway to explain what a caller sees, or review its tool
//! definition changes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use otc_gateway::admin_client::AdminClient;
use otc_gateway::config::{AuthMode, Config};
use otc_gateway::server::{self, ControlPlane};
use otc_gateway::{demo, explain};

/// One URL in front of many OTC tool servers.
#[derive(Parser)]
#[command(name = "otc-gateway", version, about)]
struct Cli {
    /// The config file.
    #[arg(long, global = true, default_value = "gateway.toml")]
    config: PathBuf,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a config and exit: 0 when valid, 1 with the key and line when not.
    Check,
    /// Start the gateway with built-in example tool servers and a stand-in
    /// OAuth provider on loopback.
    Demo {
        /// Where the demo gateway listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Where its admin endpoints listen.
        #[arg(long, default_value = "127.0.0.1:9464")]
        admin_listen: String,
    },
    /// Ask a running gateway's admin listener why a caller sees, or does not
    /// see, each tool (`GET /explain`), in words.
    Explain(ExplainArgs),
    /// Review a running gateway's tool definition changes (`GET /changes`,
    /// `POST /changes/<id>/approve` or `reject`).
    Changes(ChangesArgs),
}

/// `otc-gateway changes`' arguments.
#[derive(clap::Args)]
struct ChangesArgs {
    #[command(subcommand)]
    action: ChangesAction,
    /// The running gateway's admin listener, `host:port` (default: `[server]
    /// admin_listen` of --config).
    #[arg(long, global = true)]
    admin: Option<String>,
    /// The admin token to present, as a secret reference (`env:NAME`,
    /// `file:/path`). Default: `[server] admin_token` of --config, when the
    /// address comes from --config too.
    #[arg(long, global = true, value_name = "REFERENCE")]
    admin_token: Option<String>,
    /// Print the admin listener's JSON instead of words.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum ChangesAction {
    /// The changes in a state: pending (default), approved, rejected or all.
    List {
        /// pending, approved, rejected or all.
        #[arg(long, default_value = "pending")]
        state: String,
    },
    /// Pins the proposed definition: clients are shown it from now on.
    Approve {
        /// The change's id (from `list`).
        id: String,
        /// Who decides, for the record (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Never serves the proposed definition, nor offers it again.
    Reject {
        /// The change's id (from `list`).
        id: String,
        /// Who decides, for the record (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
}

impl ChangesAction {
    fn state(&self) -> &str {
        match self {
            ChangesAction::List { state } => state,
            _ => "",
        }
    }
}

/// `otc-gateway explain`'s arguments.
#[derive(clap::Args)]
struct ExplainArgs {
    /// The running gateway's admin listener, `host:port` (default: `[server]
    /// admin_listen` of --config).
    #[arg(long)]
    admin: Option<String>,
    /// The caller's user id.
    #[arg(long)]
    user_id: Option<String>,
    /// The caller's JWT claims, a JSON object.
    #[arg(long)]
    claims: Option<String>,
    /// A JWT to read the claims of (decoded, not verified); `-` reads it from
    /// stdin, keeping it out of the process list.
    #[arg(long)]
    jwt: Option<String>,
    /// The user id is an API key's (no claims).
    #[arg(long)]
    api_key: bool,
    /// A tool reference (`Toolkit.Name`, `Toolkit.Name@version`, or the
    /// tool's MCP name `Toolkit_Name`): how it
    /// resolves, its requirements and rate limits for this caller.
    #[arg(long)]
    tool: Option<String>,
    /// A virtual server (`[[servers]]`): what the caller sees through it,
    /// and why each tool is or is not in it.
    #[arg(long)]
    server: Option<String>,
    /// The admin token to present, as a secret reference (`env:NAME`,
    /// `file:/path`; never the value itself, which the process list would
    /// show). Default: `[server] admin_token` of --config, when the
    /// address comes from --config too (not with --admin).
    #[arg(long, value_name = "REFERENCE")]
    admin_token: Option<String>,
    /// Print the admin listener's JSON instead of words.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// mimalloc: per-call allocations (pingora's session, hyper's buffers,
/// serde's values) cost a tenth of the call under glibc's malloc.
#[global_allocator]
static ALLOCATOR: otc_gateway::allocator::Allocator = otc_gateway::allocator::Allocator;

fn main() -> ExitCode {
    otc_gateway::allocator::use_small_pages();
    otc_gateway::allocator::purge_freed_memory_at_once();
    let cli = Cli::parse();
    // Held for the life of the process: dropping it would stop the log writer.
    // `check` prints its findings; the gateway's own info lines are noise there.
    let default_level = if matches!(cli.command, Some(Command::Check | Command::Explain(_))) { "warn" } else { "info" };
    let _log_writer = init_logging(cli.log_format, default_level);
    match cli.command {
        Some(Command::Check) => match Config::load(&cli.config) {
            Ok(config) => {
                println!("{}: valid ({} upstreams)", cli.config.display(), config.upstreams.len());
                if config.auth.mode == AuthMode::Jwt && config.auth.authorization_servers().is_empty() {
                    eprintln!(
                        "warning: [auth] names no authorization server (authorization_servers, or an http(s) issuer): \
                         MCP clients cannot discover where to get a token"
                    );
                }
                for warning in config.security_warnings() {
                    eprintln!("warning: {warning}");
                }
                // What the catalogs can tell: which tools policies match,
                // which secrets and providers tools ask their upstream for
                // without a grant, which tools are refused or clash.
                if !config.upstreams.is_empty() && !check_against_catalogs(config) {
                    return ExitCode::FAILURE;
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Demo { listen, admin_listen }) => run_demo(&listen, &admin_listen),
        Some(Command::Explain(args)) => run_explain(args, &cli.config),
        Some(Command::Changes(args)) => run_changes(args, &cli.config),
        None => {
            let config = match Config::load(&cli.config) {
                Ok(config) => config,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            start(config, cli.config)
        }
    }
}

fn run_demo(listen: &str, admin_listen: &str) -> ExitCode {
    // The demo's own credentials, read through env: references as a real
    // config would (set before any thread starts).
    for (name, value) in [demo::DEMO_USER_KEY, demo::DEMO_CLIENT_SECRET, demo::DEMO_NOTES_KEY] {
        std::env::set_var(name, value);
    }
    let state_dir = std::env::temp_dir().join(format!("otc-gateway-demo-{}", std::process::id()));
    let control = match ControlPlane::new() {
        Ok(control) => control,
        Err(e) => return fail(e),
    };
    let servers = match control.handle().block_on(demo::start_demo_servers()) {
        Ok(servers) => servers,
        Err(e) => return fail(e),
    };
    let text = demo::demo_config(listen, admin_listen, servers, &state_dir);
    let config = match Config::parse(&text, "built-in demo config") {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    match server::run(config, None, control, Some(demo::demo_banner)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn start(config: Config, path: PathBuf) -> ExitCode {
    let control = match ControlPlane::new() {
        Ok(control) => control,
        Err(e) => return fail(e),
    };
    match server::run(config, Some(path), control, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// `check`: the config against the upstreams' current catalogs, as
/// warnings, never errors: a policy pattern that matches no tool (a typo, or
/// a tool not published yet), a requirement a tool declares that its
/// upstream was not granted (with the line that grants it), a tool not
/// served because another upstream reserved its toolkit, a toolkit several
/// upstreams serve. Unreachable upstreams are named. A virtual server's
/// fixed argument that a tool does not have is an error: false then.
fn check_against_catalogs(mut config: Config) -> bool {
    // The checks need the catalog only: the OAuth grant store and the state
    // key (a running gateway may hold them) are neither opened nor created.
    config.authorization.retain(|_, section| !section.is_managed());
    config.login = None;
    let not_checked = |e: &dyn std::fmt::Display| {
        eprintln!("warning: the config was not checked against the catalogs: {e}");
        true
    };
    let tokio = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(tokio) => tokio,
        Err(e) => return not_checked(&e),
    };
    tokio.block_on(async {
        let gateway = match otc_gateway::gateway::Gateway::for_check(config).await {
            Ok(gateway) => gateway,
            Err(e) => return not_checked(&e),
        };
        for name in gateway.fetch_catalogs_once().await {
            eprintln!("warning: upstream {name}: catalog not fetched; its tools are not in the check");
        }
        let catalog = gateway.catalog.load();
        for pattern in gateway.generation().access.unmatched_patterns(&catalog) {
            eprintln!(
                "warning: policy pattern {pattern:?} matches no tool in the current catalog ({} tools)",
                catalog.len()
            );
        }
        for u in catalog.ungranted_requirements(&gateway.generation().config) {
            eprintln!(
                "warning: tool {} declares {} {:?}, which upstream {} is not granted: its calls are refused; to grant it, add `{} = [\"{}\"]` to [[upstreams]] {:?}",
                u.tool,
                if u.key == "secrets" { "secret" } else { "provider" },
                u.id,
                u.upstream,
                u.key,
                u.id,
                u.upstream
            );
        }
        for refused in catalog.refused() {
            eprintln!("warning: tool {} of upstream {} is not served: {}", refused.tool, refused.upstream, refused.reason);
        }
        for held in catalog.held() {
            let what = match held.kind {
                otc_gateway::integrity::ChangeKind::New => "is not served: the scan flagged its definition",
                otc_gateway::integrity::ChangeKind::Changed => "is served at its pinned definition: it changed",
            };
            eprintln!(
                "warning: tool {} of upstream {} {what}; review change {} (GET /changes, `otc-gateway changes`)",
                held.tool, held.upstream, held.change
            );
        }
        for clash in catalog.mcp_name_conflicts() {
            eprintln!(
                "warning: tools {} and {} both have the MCP name {}: {} holds it ({}), {} is not served on /mcp; `toolkits = [\"{}\"]` on its upstream reserves the toolkit that should hold it",
                clash.served,
                clash.hidden,
                clash.name,
                clash.served,
                clash.reason,
                clash.hidden,
                clash.hidden.split_once('.').map_or(clash.hidden.as_str(), |(toolkit, _)| toolkit),
            );
        }
        for shared in catalog.shared_toolkits() {
            eprintln!(
                "warning: toolkit {} is served by several upstreams ({}); `toolkits = [\"{}\"]` on one of them reserves it",
                shared.toolkit,
                shared.upstreams.join(", "),
                shared.toolkit
            );
        }
        check_servers(&catalog)
    })
}

/// `check`'s findings on `[[servers]]`: warnings, and an error (false) for
/// a fixed argument a tool does not have or whose value it refuses.
fn check_servers(catalog: &otc_gateway::catalog::Catalog) -> bool {
    let mut valid = true;
    for report in catalog.servers().filter_map(|view| Some(&view.as_server()?.report)) {
        let server = &report.name;
        for pattern in &report.unmatched_patterns {
            eprintln!("warning: server {server}: pattern {pattern:?} matches no tool in the current catalog");
        }
        for tool in &report.absent_tools {
            eprintln!("warning: server {server}: {tool} is not in the current catalog");
        }
        for clash in &report.rename_collisions {
            eprintln!(
                "warning: server {server}: {} is renamed {}, which is {}'s own name: {} is not served in it",
                clash.served, clash.name, clash.hidden, clash.hidden
            );
        }
        for clash in &report.mcp_name_conflicts {
            eprintln!(
                "warning: server {server}: tools {} and {} both have the MCP name {}: {} is not served on its /mcp",
                clash.served, clash.hidden, clash.name, clash.hidden
            );
        }
        for problem in &report.fixed_problems {
            valid = false;
            eprintln!(
                "error: server {server}: fixed argument {:?} of {}: {}",
                problem.argument, problem.tool, problem.problem
            );
        }
    }
    valid
}

/// `explain`: one `POST /explain` to the admin listener (the JWT in the
/// body, never in a URL), printed in words or as JSON.
fn run_explain(args: ExplainArgs, config_path: &std::path::Path) -> ExitCode {
    let jwt = match args.jwt.as_deref() {
        Some("-") => {
            let mut text = String::new();
            if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
                return fail(format!("reading the JWT from stdin: {e}"));
            }
            Some(text.trim().to_owned())
        }
        other => other.map(str::to_owned),
    };
    let claims = match args.claims.as_deref().map(serde_json::from_str::<serde_json::Value>) {
        None => None,
        Some(Ok(claims)) => Some(claims),
        Some(Err(e)) => return fail(format!("--claims: not JSON: {e}")),
    };
    let request = explain::ExplainRequest {
        user_id: args.user_id,
        claims,
        jwt,
        api_key: args.api_key,
        tool: args.tool,
        server: args.server,
    };
    let body = match serde_json::to_vec(&request) {
        Ok(body) => body,
        Err(e) => return fail(e),
    };
    let asked =
        ask_admin(args.admin, args.admin_token.as_deref(), config_path, http::Method::POST, "/explain", Some(body));
    match asked {
        Ok(body) if args.json => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Ok(body) => match serde_json::from_str::<explain::Explanation>(&body) {
            Ok(explanation) => {
                print!("{}", explain::in_words(&explanation));
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("the admin listener's answer: {e}")),
        },
        Err(e) => fail(e),
    }
}

/// `changes`: the tool definition changes of a running gateway, listed,
/// approved or rejected through its admin listener.
fn run_changes(args: ChangesArgs, config_path: &std::path::Path) -> ExitCode {
    let (method, path, body) = match &args.action {
        ChangesAction::List { state } => (http::Method::GET, format!("/changes?state={state}"), None),
        ChangesAction::Approve { id, by } | ChangesAction::Reject { id, by } => {
            let verb = if matches!(args.action, ChangesAction::Approve { .. }) { "approve" } else { "reject" };
            let body = serde_json::json!({ "by": by.clone().unwrap_or_else(whoami) }).to_string().into_bytes();
            (http::Method::POST, format!("/changes/{id}/{verb}"), Some(body))
        }
    };
    match ask_admin(args.admin, args.admin_token.as_deref(), config_path, method, &path, body) {
        Ok(body) if args.json => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Ok(body) => {
            let value: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            match value.get("changes").and_then(serde_json::Value::as_array) {
                Some(changes) if changes.is_empty() => println!("no {} changes", args.action.state()),
                Some(changes) => changes.iter().for_each(|change| print!("{}", change_in_words(change))),
                None => print!("{}", change_in_words(&value)),
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// Who runs the command, for the decision's record.
fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "otc-gateway changes".to_owned())
}

/// A change in a few lines: what, where, what the scan found, and what
/// text it would show.
fn change_in_words(change: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = format!(
        "{}  {}  {} {} (upstream {})\n",
        text(&change["id"]),
        text(&change["state"]),
        text(&change["kind"]),
        text(&change["tool"]),
        text(&change["upstream"])
    );
    for finding in change["findings"].as_array().into_iter().flatten() {
        out +=
            &format!("    found {} in {}: {}\n", text(&finding["kind"]), text(&finding["field"]), finding["excerpt"]);
    }
    let (approved, proposed) = (&change["approved"]["description"], &change["proposed"]["description"]);
    if approved != proposed {
        out += &format!("    description now:      {approved}\n    description proposed: {proposed}\n");
    }
    out
}

/// One request to the admin listener, on a runtime of its own.
fn ask_admin(
    admin: Option<String>,
    token: Option<&str>,
    config_path: &std::path::Path,
    method: http::Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<String, String> {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    tokio.block_on(async {
        let client = AdminClient::new(admin, token, config_path).await?;
        client.request(method, path, body).await
    })
}

fn fail(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// Logs go to stderr through a background writer, so a call never waits on
/// the terminal or a log pipe.
fn init_logging(format: LogFormat, default_level: &str) -> tracing_appender::non_blocking::WorkerGuard {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // These crates print whole request headers (Authorization included) at
    // trace level. A second filter caps them at debug whatever RUST_LOG says,
    // so no token ever reaches the log; it only lowers, never raises, a level.
    let cap = ["pingora", "pingora_core", "hyper", "hyper_util", "rustls"]
        .into_iter()
        .fold(Targets::new().with_default(LevelFilter::TRACE), |cap, target| {
            cap.with_target(target, LevelFilter::DEBUG)
        });
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    // Colours only for a person at a terminal, never in files or pipes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let registry = tracing_subscriber::registry().with(cap).with(filter);
    let layer = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(writer);
    match format {
        LogFormat::Text => registry.with(layer).init(),
        LogFormat::Json => registry.with(layer.json()).init(),
    }
    guard
}
