//! The `exec` tool's confinement (SECURITY.md "Sandbox"): what a command may touch, decided once
//! at start-up from the settings (`CASHCODE_SANDBOX*`) and the server's `PATH`, and applied in
//! the child between `fork` and `execve`, so no helper binary and no namespace is needed.
//!
//! - Filesystem (Landlock): read + write + execute in the workspace, a private `TMPDIR` per call
//!   and a sandbox `HOME` per chat (both under `<data>/sandbox/`); read + execute in the system
//!   directories and the toolchains on `PATH`; nothing of the server's data, memory, config or
//!   log directories, of the rest of `$HOME` or of the host's `/tmp`.
//! - Process scoping (Landlock): no signals to, ptrace of, or `/proc/<pid>/{mem,environ,fd}` of
//!   processes outside the command's domain (the server above all); no abstract Unix sockets
//!   outside it. (As root, Landlock let a child holding `CAP_SYS_PTRACE` read a dumpable
//!   process's `environ` on this kernel; the capability drop below closes that.)
//! - System calls (seccomp): no sockets (Unix ones and network ones each allowed by a
//!   setting; `socketpair` always), no namespaces, mounts, io_uring, kernel administration,
//!   keyrings, SysV IPC, `TIOCSTI`, setuid/setgid modes; `no_new_privs`, so setuid binaries
//!   gain nothing; for a root server, a bounding set of container runtimes' default
//!   capabilities without `FSETID`/`SETFCAP`, and no extended attributes.
//! - Lifetime: the spawned process is the call's reaper ([`become_reaper`]), which kills
//!   everything the call started when it ends; no controlling terminal (`exec` makes each
//!   command a session of its own).
//!
//! Why `pre_exec` and not `posix_spawn`: a `pre_exec` step makes std `fork` the server, which
//! copies its page tables (about 1 ms at 32 MiB, benches/README.md). Confining a short-lived
//! thread and spawning from it would keep `posix_spawn`, but the child would share that
//! thread's Landlock domain and could signal the server through the thread until it exits. So
//! there is one such copy per call: the reaper starts the command with a `clone` that shares
//! its memory until `execve`, as `posix_spawn` does ([`start_command`]), not a second `fork`.
//!
//! Everything that allocates (opening the roots, the Landlock ruleset, the BPF programs) is
//! built in the parent, on the turn's worker thread; the `pre_exec` closure only makes the
//! system calls that apply them, which allocate nothing (`restrict_self` on the prepared
//! ruleset descriptor, `seccomp(SET_MODE_FILTER)` on the prepared program, `execve` on the
//! command's prepared arguments and environment). The start-up check
//! runs on a short-lived `sandbox-probe` thread, which confines itself (Landlock and seccomp
//! apply per thread) and reports what the kernel enforced before it exits.

pub(crate) mod call_pids;
pub(crate) mod control_files;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};
use serde::Serialize;

use crate::config::SandboxConfig;
use crate::sandbox::call_pids::CallPids;
use crate::sandbox::control_files::ChangeLog;

/// The newest Landlock ABI whose rights are requested; older kernels enforce what they know
/// (best effort), and the status reports the kernel's own ABI.
const LANDLOCK_ABI: ABI = ABI::V9;
/// System directories a command may read and execute from, where they exist.
const SYSTEM_ROOTS: &[&str] =
    &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix/store", "/snap"];
/// Kernel views: `/proc` (other processes' sensitive files are behind ptrace checks, which the
/// Landlock domain and the server's non-dumpable flag fail) and `/sys` (CPU and memory limits).
const KERNEL_ROOTS: &[&str] = &["/proc", "/sys"];
/// Device files a command may read and write.
/// Not `/dev/tty`: a command has no controlling terminal (its own session), and the owner's
/// terminal is no place to queue input for (`TIOCSTI`).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];
/// Places under `$HOME` that hold credentials: never granted, even inside a granted toolchain.
const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".config",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".npmrc",
    ".pypirc",
    // Secret stores and history under `~/.local` and beside it (a toolchain on `PATH` under
    // `$HOME` is granted as its own directory, but an extra root may still hold these).
    ".local/share/keyrings",
    ".local/share/kwalletd",
    ".local/share/gnupg",
    ".local/share/fish",
    ".local/state",
    ".password-store",
    ".pki",
    ".mozilla",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".lesshst",
    ".viminfo",
];
/// Environment variables that point a command at the server's own per-user directories; the
/// sandbox `HOME` replaces them.
const USER_DIR_VARS: &[&str] =
    &["XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"];
/// Entries of one directory looked at when splitting a root around a protected path, or when
/// following a `PATH` entry's symlinked executables.
const MAX_DIR_ENTRIES: usize = 20_000;
/// Capabilities a command run by a root server keeps (container runtimes' default set);
/// every other one leaves the bounding set, so the shell and what it runs never hold them:
/// no `CAP_SYS_PTRACE` (the non-dumpable server stays unreadable), no `CAP_DAC_READ_SEARCH`
/// (`open_by_handle_at` would bypass path checks), no `CAP_SYS_ADMIN`, `CAP_SYS_MODULE`, ….
/// Numbers from `linux/capability.h`: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID,
/// SETUID, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, AUDIT_WRITE. Not FSETID or SETFCAP (the
/// runtimes keep them): a root command must not leave setuid/setgid files or file
/// capabilities behind for other local users to run (seccomp refuses the mode bits too).
const KEPT_CAPS: [libc::c_ulong; 10] = [0, 1, 3, 5, 6, 7, 8, 10, 18, 29];
/// Above every capability number the kernel knows (`PR_CAPBSET_DROP` answers `EINVAL` there).
const CAP_NUMBERS: libc::c_ulong = 64;
/// `setxattrat` (Linux 6.13), which the libc crate does not name yet; the same number on every
/// architecture (system calls added since 5.1 share one table).
const SYS_SETXATTRAT: i64 = 463;
/// x32 system calls arrive with this bit set in the number, under the x86-64 audit arch.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// `GET /api/settings/sandbox` (docs/http-api.md): what the kernel offers and what is applied.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Status {
    /// The kernel can confine commands (Landlock and seccomp both applied in the start-up check).
    pub(crate) available: bool,
    /// Commands run confined (available and not turned off).
    pub(crate) active: bool,
    pub(crate) landlock: LandlockView,
    pub(crate) seccomp: SeccompView,
    /// The start-up check's thread got `no_new_privs` (every confined command does).
    pub(crate) no_new_privs: bool,
    /// The server process is not dumpable (no `/proc/<pid>/mem` or ptrace for its uid).
    pub(crate) non_dumpable: bool,
    /// `"off"` or `"on"`.
    pub(crate) network: &'static str,
    /// `"off"` or `"on"`: `socket(AF_UNIX)` (`CASHCODE_SANDBOX_UNIX_SOCKETS`).
    pub(crate) unix_sockets: &'static str,
    pub(crate) read_roots: Vec<String>,
    pub(crate) write_roots: Vec<String>,
    /// Each call runs in a `pids` group of its own with a process limit (`sandbox::call_pids`):
    /// the server may create groups below its own.
    pub(crate) call_process_limit: bool,
    /// Why commands are not confined, or what the kernel lacks; `None` when fully confined.
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct LandlockView {
    pub(crate) active: bool,
    /// The kernel's Landlock ABI; `None` without Landlock.
    pub(crate) abi: Option<i32>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct SeccompView {
    pub(crate) active: bool,
}

/// The confinement policy and the start-up status. Built once by `app::start`; shared by the
/// `exec` tool and the status route.
pub struct Sandbox {
    status: Status,
    /// `None` when the sandbox is off or the kernel cannot apply it.
    policy: Option<Policy>,
    /// Control files each chat's confined commands changed (`sandbox::control_files`).
    control: Arc<ChangeLog>,
}

struct Policy {
    /// Read + execute.
    read: Vec<PathBuf>,
    /// The read roots and the device files, opened once (`O_PATH`) with the rights each gets
    /// (a file cannot hold directory rights): a call adds them to its ruleset without a lookup.
    fixed: Vec<(PathFd, BitFlags<AccessFs>)>,
    /// Read + write + execute (the extra write roots and the sandbox `HOME`; the workspace and
    /// the call's `TMPDIR` are added per call).
    write: Vec<PathBuf>,
    /// Paths no root may reach (the server's own directories, `$HOME` credentials).
    protected: Vec<PathBuf>,
    home: PathBuf,
    tmp_root: PathBuf,
    network: bool,
    unix_sockets: bool,
    /// Free bytes a call leaves on the data directory's filesystem ([`Sandbox::disk_low`]).
    disk_reserve: u64,
    filters: Arc<Vec<BpfProgram>>,
    /// The kernel scopes signals to Landlock domains (ABI 6): each call gets a reaper.
    scoped_signals: bool,
}

/// How often a running confined call's disk reserve is checked ([`Sandbox::disk_low`]): at
/// 1 GB/s a command writes 250 MB between checks, half the default reserve.
pub(crate) const DISK_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// One call's confinement, prepared in the parent.
pub(crate) struct Prepared {
    ruleset: RulesetCreated,
    /// The reaper's own domain (signal scoping only); `None` when the kernel cannot scope
    /// signals, and the call runs without a reaper.
    reaper: Option<RulesetCreated>,
    filters: Arc<Vec<BpfProgram>>,
    home: PathBuf,
    tmp: TempDir,
    /// The call's process group with its limit; `None` where the kernel offers none.
    pids: Option<CallPids>,
}

/// The call's private `TMPDIR`, removed when the call is over.
pub(crate) struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        // std's remove_dir_all does not follow symlinks a command left inside.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two sandboxes are alike when they report the same status.
impl PartialEq for Sandbox {
    fn eq(&self, other: &Self) -> bool {
        self.status == other.status
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("active", &self.status.active).finish_non_exhaustive()
    }
}

/// The server's own directories, which no command may reach.
pub(crate) struct ServerDirs<'a> {
    pub(crate) data: &'a Path,
    pub(crate) memory: &'a Path,
    pub(crate) config: &'a Path,
    pub(crate) log: &'a Path,
    /// The workspace: a system or toolchain root may contain it, which is fine (it is granted
    /// anyway), but the split around protected paths must not drop it.
    pub(crate) workspace: &'a Path,
}

impl Sandbox {
    /// No confinement, with `reason` (unit tests of the tools, and builds for other systems).
    pub(crate) fn off(reason: &str) -> Sandbox {
        Sandbox {
            status: Status {
                available: false,
                active: false,
                landlock: LandlockView { active: false, abi: None },
                seccomp: SeccompView { active: false },
                no_new_privs: false,
                non_dumpable: server_non_dumpable(),
                network: "on",
                unix_sockets: "on",
                call_process_limit: false,
                read_roots: Vec::new(),
                write_roots: Vec::new(),
                reason: Some(reason.to_string()),
            },
            policy: None,
            control: Arc::default(),
        }
    }

    /// Builds the policy from the settings and checks on a probe thread what the kernel
    /// enforces. Never fails: what cannot be confined is reported in the status.
    pub(crate) fn start(settings: &SandboxConfig, dirs: &ServerDirs) -> Sandbox {
        let base = dirs.data.join("sandbox");
        let (home, tmp_root) = (base.join("home"), base.join("tmp"));
        // Leftover per-call directories and process groups of a crashed run go first.
        let _ = std::fs::remove_dir_all(&tmp_root);
        CallPids::sweep();
        for d in [&home, &tmp_root] {
            if let Err(e) = crate::util::fsx::create_private_dirs(d) {
                return Sandbox::off(&format!("cannot create {}: {e}", d.display()));
            }
        }
        let protected = protected_paths(dirs, settings.env_home.as_deref());
        if protected.iter().any(|p| p.starts_with(dirs.workspace) && p != dirs.workspace) {
            log::warn!(
                "event=sandbox.workspace_split workspace={:?} message=\"the workspace holds the server's own directories: commands get its other entries, and cannot create files at its top level\"",
                dirs.workspace.display().to_string()
            );
        }
        let read = read_roots(settings, dirs, &protected);
        let write: Vec<PathBuf> =
            settings.write.iter().flat_map(|r| split_around(&canonical(r), &protected, dirs.workspace)).collect();
        let root = nix::unistd::geteuid().is_root();
        let filters =
            match build_filters(&Rules { network: settings.network, unix_sockets: settings.unix_sockets, root }) {
                Ok(f) => Arc::new(f),
                Err(e) => return Sandbox::off(&format!("no seccomp filter for this system: {e}")),
            };
        let abi = LANDLOCK_ABI;
        let fixed = read
            .iter()
            .map(|p| (p.as_path(), AccessFs::from_read(abi)))
            .chain(DEVICES.iter().map(|d| (Path::new(*d), AccessFs::from_all(abi))))
            .filter_map(|(path, access)| {
                let fd = PathFd::new(path).ok()?;
                let is_file = std::fs::metadata(path).is_ok_and(|m| !m.is_dir());
                Some((fd, if is_file { access & AccessFs::from_file(abi) } else { access }))
            })
            .collect();
        let policy = Policy {
            read,
            fixed,
            write,
            protected,
            home: canonical(&home),
            tmp_root: canonical(&tmp_root),
            network: settings.network,
            unix_sockets: settings.unix_sockets,
            disk_reserve: settings.disk_reserve,
            filters,
            scoped_signals: false,
        };
        let probe = probe(&policy, dirs.workspace, dirs.data);
        let mut status = Status {
            available: probe.landlock && probe.seccomp && probe.no_new_privs,
            active: false,
            landlock: LandlockView { active: probe.landlock, abi: probe.abi },
            seccomp: SeccompView { active: probe.seccomp },
            no_new_privs: probe.no_new_privs,
            non_dumpable: server_non_dumpable(),
            network: if settings.network { "on" } else { "off" },
            unix_sockets: if settings.unix_sockets { "on" } else { "off" },
            call_process_limit: crate::sandbox::call_pids::available(),
            read_roots: policy.read.iter().map(|p| p.display().to_string()).collect(),
            write_roots: [dirs.workspace, &policy.tmp_root, &policy.home]
                .into_iter()
                .chain(policy.write.iter().map(PathBuf::as_path))
                .map(|p| p.display().to_string())
                .collect(),
            reason: probe.reason,
        };
        status.active = status.available && settings.enabled;
        if !settings.enabled {
            status.reason = Some("turned off by CASHCODE_SANDBOX=off".into());
        }
        let mut policy = status.active.then_some(policy);
        if let Some(p) = policy.as_mut() {
            p.scoped_signals = probe.landlock && probe.abi.is_some_and(|a| a >= 6);
        }
        Sandbox { status, policy, control: Arc::default() }
    }

    /// A sandbox with the default settings (network off, no extra roots) and this process's
    /// `PATH` and `HOME`, over `data` as the server's data directory (benches).
    pub fn with_defaults(data: &Path, workspace: &Path) -> Sandbox {
        let settings = SandboxConfig {
            env_path: std::env::var("PATH").ok(),
            env_home: std::env::var_os("HOME").map(PathBuf::from),
            ..SandboxConfig::default()
        };
        Sandbox::start(&settings, &ServerDirs { data, memory: data, config: data, log: data, workspace })
    }

    /// The control files each chat's confined commands changed and `exec` put back.
    pub(crate) fn control_log(&self) -> &Arc<ChangeLog> {
        &self.control
    }

    pub(crate) fn status(&self) -> &Status {
        &self.status
    }

    /// Commands run confined: the kernel offers the layers and the owner did not turn them off.
    pub fn active(&self) -> bool {
        self.policy.is_some()
    }

    /// `Some((free, reserve))` in bytes when the filesystem of the server's data directory,
    /// where the sandbox `HOME` and `TMPDIR` live (and usually the workspace), has less free
    /// space than the reserve: a confined call is not started then, and one running is stopped
    /// (`exec` checks every [`DISK_CHECK_EVERY`]), so a command filling the disk never leaves
    /// the server unable to save a chat. One `statvfs`.
    pub(crate) fn disk_low(&self) -> Option<(u64, u64)> {
        let policy = self.policy.as_ref()?;
        let st = nix::sys::statvfs::statvfs(&policy.home).ok()?;
        let free = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
        (free < policy.disk_reserve).then_some((free, policy.disk_reserve))
    }

    /// Opens the roots and builds the Landlock ruleset for one call in `workspace`, and makes
    /// the call's `TMPDIR`. Runs in the parent; [`Prepared::apply`] hands it to the child.
    pub(crate) fn prepare(&self, workspace: &Path, chat_id: &str) -> Result<Prepared, String> {
        let policy = self.policy.as_ref().ok_or("the sandbox is not active")?;
        // One `HOME` per chat: a `.gitconfig` or shell profile one chat's command planted
        // never runs in another's. Chat ids are `[A-Za-z0-9_:-]{1,64}` (checked where they
        // enter); anything else is refused rather than made into a path.
        let name_ok = !chat_id.is_empty()
            && chat_id.len() <= 64
            && chat_id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'));
        if !name_ok {
            return Err("the chat id is not a directory name".into());
        }
        let home = policy.home.join(chat_id);
        crate::util::fsx::create_private_dirs(&home).map_err(|e| format!("cannot create a HOME: {e}"))?;
        let tmp = TempDir(policy.tmp_root.join(crate::util::rand::hex(8)));
        crate::util::fsx::create_private_dirs(&tmp.0).map_err(|e| format!("cannot create a TMPDIR: {e}"))?;
        let mut write = split_around(workspace, &policy.protected, workspace);
        write.push(tmp.0.clone());
        write.push(home.clone());
        write.extend(policy.write.iter().cloned());
        let ruleset = policy.ruleset(&write).map_err(|e| format!("cannot build the sandbox: {e}"))?;
        let reaper = match policy.scoped_signals {
            true => Some(
                Ruleset::default()
                    .scope(Scope::Signal)
                    .and_then(Ruleset::create)
                    .map_err(|e| format!("cannot build the sandbox: {e}"))?,
            ),
            false => None,
        };
        let pids = CallPids::create();
        Ok(Prepared { ruleset, reaper, filters: Arc::clone(&policy.filters), home, tmp, pids })
    }
}

impl Policy {
    fn ruleset(&self, write: &[PathBuf]) -> Result<RulesetCreated, landlock::RulesetError> {
        let abi = LANDLOCK_ABI;
        let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(abi))?.scope(Scope::from_all(abi))?;
        if !self.network {
            // Defence in depth for TCP; seccomp already refuses the sockets.
            ruleset = ruleset.handle_access(AccessNet::from_all(ABI::V4))?;
        }
        ruleset
            .create()?
            .add_rules(
                self.fixed
                    .iter()
                    .map(|(fd, access)| Ok::<_, landlock::RulesetError>(PathBeneath::new(fd.as_fd(), *access))),
            )?
            .add_rules(path_beneath_rules(write, AccessFs::from_all(abi)))
    }
}

impl Prepared {
    /// Sets the child's `HOME` and `TMPDIR` and installs the `pre_exec` step that confines it
    /// (and, where the kernel scopes signals, makes the spawned process the call's reaper,
    /// which starts the command itself). Call it last: the command's program, arguments and
    /// environment are read from `cmd` now.
    pub(crate) fn apply(self, cmd: &mut Command) -> Confined {
        let reaped = self.reaper.is_some();
        cmd.env("HOME", &self.home).env("TMPDIR", &self.tmp.0);
        for v in USER_DIR_VARS {
            cmd.env_remove(v);
        }
        let mut ruleset = Some(self.ruleset);
        let mut reaper = self.reaper;
        let filters = self.filters;
        let procs = self.pids.as_ref().map(|p| p.procs().to_owned());
        // What the reaper runs; allocated here, before the fork.
        let image = reaped.then(|| Image::of(cmd));
        let mut stack = if reaped { vec![0u8; COMMAND_STACK] } else { Vec::new() };
        // Only root holds capabilities to drop.
        let root = nix::unistd::geteuid().is_root();
        let confine = move || -> io::Result<()> {
            let denied = || io::Error::from_raw_os_error(libc::EPERM);
            // First, so the reaper and everything after count against the call's limit.
            if let Some(procs) = &procs {
                CallPids::join_self(procs)?;
            }
            // Between fork and execve: nothing here allocates. `take` moves the ruleset out
            // of the child's copy of the closure; `restrict_self` sets no_new_privs, applies
            // the ruleset to this (the only) thread and closes its descriptor.
            let ruleset = ruleset.take().ok_or_else(denied)?;
            if root {
                drop_capabilities();
            }
            if let (Some(domain), Some(image)) = (reaper.take(), image.as_ref()) {
                let mut start =
                    CommandStart { ruleset: Some(ruleset), filters: &filters, image, failed: AtomicI32::new(0) };
                // Returns only when the command could not be started.
                return Err(become_reaper(domain, &mut start, &mut stack));
            }
            match ruleset.restrict_self() {
                Ok(s) if s.ruleset != RulesetStatus::NotEnforced && s.no_new_privs => {}
                _ => return Err(denied()),
            }
            for f in filters.iter() {
                seccompiler::apply_filter(f).map_err(|_| denied())?;
            }
            Ok(())
        };
        // SAFETY: `confine` runs in the forked child before execve and only makes system
        // calls (prctl, landlock_restrict_self, close, seccomp, clone, execve) on data prepared
        // before the fork; it takes no lock and allocates nothing, so it is async-signal-safe.
        // A failure fails the spawn: a command never runs half-confined.
        unsafe {
            cmd.pre_exec(confine);
        }
        Confined { _tmp: self.tmp, reaped, _pids: self.pids }
    }
}

/// Bytes of stack for the command's process between the reaper's `clone` and its `execve`
/// ([`start_command`]): a few system calls, a few hundred bytes deep.
const COMMAND_STACK: usize = 64 << 10;

/// The command as `execve` takes it, built in the parent from the `Command` std would run:
/// the candidate paths of its program (`PATH` searched as `execvp` would, in the child's
/// environment), its arguments and its environment, each with the null-terminated array of
/// pointers the call reads.
struct Image {
    candidates: Vec<CString>,
    args: CStrings,
    env: CStrings,
}

/// C strings and the null-terminated pointer array into them.
struct CStrings {
    _owned: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_owned`, which moves with them and is never changed; they
// are only read (by `execve`, in the command's process).
unsafe impl Send for CStrings {}
// SAFETY: as above: shared references only read.
unsafe impl Sync for CStrings {}

impl CStrings {
    fn new(items: impl IntoIterator<Item = Vec<u8>>) -> CStrings {
        // A NUL inside an item fails std's spawn before the fork; it never reaches `execve`.
        let owned: Vec<CString> = items.into_iter().filter_map(|b| CString::new(b).ok()).collect();
        let ptrs = owned.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        CStrings { _owned: owned, ptrs }
    }
}

impl Image {
    /// What `cmd` runs: its program, arguments and environment (the server's, with `cmd`'s
    /// changes; the `exec` tool never clears it).
    fn of(cmd: &Command) -> Image {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let mut env: BTreeMap<std::ffi::OsString, std::ffi::OsString> = std::env::vars_os().collect();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => env.insert(k.to_owned(), v.to_owned()),
                None => env.remove(k),
            };
        }
        let program = cmd.get_program().as_bytes();
        let candidates = if program.contains(&b'/') {
            vec![program.to_vec()]
        } else {
            // `execvp`'s search, minus its empty entries (the current directory: here the
            // workspace, whose files the model writes).
            let path = env.get(std::ffi::OsStr::new("PATH")).map(|p| p.as_bytes().to_vec());
            let path = path.unwrap_or_else(|| b"/bin:/usr/bin".to_vec());
            path.split(|b| *b == b':').filter(|dir| !dir.is_empty()).map(|dir| [dir, b"/", program].concat()).collect()
        };
        let args = std::iter::once(program.to_vec()).chain(cmd.get_args().map(|a| a.as_bytes().to_vec()));
        let env = env.into_iter().map(|(k, v)| [k.into_vec(), b"=".to_vec(), v.into_vec()].concat());
        Image {
            candidates: candidates.into_iter().filter_map(|c| CString::new(c).ok()).collect(),
            args: CStrings::new(args),
            env: CStrings::new(env),
        }
    }
}

/// What the reaper hands the command's process: the rest of its confinement and what it runs.
struct CommandStart<'a> {
    ruleset: Option<RulesetCreated>,
    filters: &'a [BpfProgram],
    image: &'a Image,
    /// The `errno` of the step that failed; written by the command's process before it exits,
    /// read by the reaper once `clone` returned.
    failed: AtomicI32,
}

/// A confined call's leftovers in the parent.
pub(crate) struct Confined {
    /// The call's `TMPDIR`, removed when dropped: keep it until the call is over.
    _tmp: TempDir,
    /// The spawned process is the call's reaper ([`become_reaper`]): end the call with
    /// `SIGTERM` to it, which kills everything the call started, not with a group kill.
    pub(crate) reaped: bool,
    /// The call's process group, removed when dropped (after the call: its tasks are gone).
    _pids: Option<CallPids>,
}

/// Signals that end a reaper's wait: a child's end, the server ending the call.
fn reaper_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    set.add(nix::sys::signal::Signal::SIGCHLD);
    set.add(nix::sys::signal::Signal::SIGTERM);
    set
}

/// Splits the forked child in two: this process becomes the call's reaper, in a Landlock
/// domain of its own that only scopes signals (`domain`), a child subreaper, so every
/// descendant that leaves its group or session (`setsid`, a double fork) is reparented to it;
/// it starts the command ([`start_command`]), which is confined in a domain nested in the
/// reaper's. Processes of a nested domain cannot signal the reaper; the reaper can signal
/// them and nobody else (Landlock's signal scoping, ABI 6): when the shell ends, or the server
/// sends `SIGTERM` (timeout, cancel, the turn's end, the server's own end), it sends `SIGKILL`
/// to every process it may signal (`kill(-1)`), reaps them all, and exits as the shell did. So
/// nothing a call started outlives it, and rewind's closing scan sees everything it wrote.
/// Returns only why the command could not start (std's spawn reports it); otherwise the
/// reaper never returns. Async-signal-safe: system calls only, on the stack.
fn become_reaper(domain: RulesetCreated, start: &mut CommandStart, stack: &mut [u8]) -> io::Error {
    use nix::sys::signal::{sigprocmask, SigmaskHow};
    let denied = |_| io::Error::from_raw_os_error(libc::EPERM);
    // A `kill(-1)` outside a scoped domain would reach every process of the uid: refuse to
    // start rather than reap without it.
    match domain.restrict_self() {
        Ok(s) if s.ruleset == RulesetStatus::FullyEnforced => {}
        _ => return io::Error::from_raw_os_error(libc::EPERM),
    }
    let set_up = || -> io::Result<()> {
        nix::sys::prctl::set_child_subreaper(true).map_err(denied)?;
        // The server's end (a crash included) ends the call too: the spawning thread waits
        // for the call, so its exit means the server's.
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(denied)?;
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&reaper_signals()), None).map_err(denied)
    };
    if let Err(e) = set_up() {
        return e;
    }
    let shell = match start_command(start, stack) {
        Ok(pid) => pid,
        Err(e) => return e,
    };
    // The reaper holds no descriptor: the command's pipes end with the command, and std's
    // spawn, which reads its error pipe until `execve` closes it, returns once the shell
    // started instead of when the reaper exits.
    // SAFETY: close_range on descriptors of this process only, which nothing here uses.
    unsafe {
        libc::close_range(0, libc::c_uint::MAX, 0);
    }
    reap(shell, &reaper_signals())
}

/// Starts the command's process from the reaper with `clone(CLONE_VM | CLONE_VFORK)`, as
/// `posix_spawn` does: it runs on `stack` in the reaper's memory until its `execve`, and the
/// reaper waits until then. A `fork` here would copy the reaper's page tables, which are the
/// server's (benches/README.md: about 1 ms at 32 MiB). The command's process unblocks the
/// reaper's signals, enters its domain and filters, and runs the image; `Err` is why not.
///
/// libc's `clone` rather than nix's: nix's takes a boxed closure and frees it in the reaper
/// after the call, and nothing between this fork and `execve` may allocate or free.
fn start_command(start: &mut CommandStart, stack: &mut [u8]) -> io::Result<nix::unistd::Pid> {
    extern "C" fn command(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the reaper's `CommandStart`, which outlives this process's use of
        // it: the reaper is suspended (CLONE_VFORK) until the `execve` below or `_exit`.
        let start = unsafe { &mut *(arg as *mut CommandStart) };
        let errno = run_command(start);
        start.failed.store(errno, Ordering::SeqCst);
        // SAFETY: ends this process without running anything of the reaper's.
        unsafe { libc::_exit(127) }
    }
    let top = stack.as_mut_ptr_range().end;
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: `command` runs on `stack` (16-byte aligned top) and only makes system calls on
    // `start`, which lives until `clone` returns; with CLONE_VFORK that is after its `execve`
    // or its end. SIGCHLD: the reaper learns of its end like of a forked child's.
    let pid = unsafe {
        libc::clone(
            command,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (start as *mut CommandStart).cast(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let pid = nix::unistd::Pid::from_raw(pid);
    match start.failed.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            let _ = nix::sys::wait::waitpid(pid, None);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// The command's process until its `execve`: returns the `errno` of the step that failed.
fn run_command(start: &mut CommandStart) -> libc::c_int {
    use nix::sys::signal::{sigprocmask, SigmaskHow};
    if sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&reaper_signals()), None).is_err() {
        return libc::EPERM;
    }
    match start.ruleset.take().map(RulesetCreated::restrict_self) {
        Some(Ok(s)) if s.ruleset != RulesetStatus::NotEnforced && s.no_new_privs => {}
        _ => return libc::EPERM,
    }
    for f in start.filters {
        if seccompiler::apply_filter(f).is_err() {
            return libc::EPERM;
        }
    }
    // `execvp`'s search over the prepared candidates: a missing or unreadable one is skipped,
    // EACCES is reported if no candidate ran and one was refused.
    let image = start.image;
    let mut refused = false;
    let mut errno = libc::ENOENT;
    for path in &image.candidates {
        // SAFETY: null-terminated arrays of C strings that live as long as the image.
        unsafe {
            libc::execve(path.as_ptr(), image.args.ptrs.as_ptr(), image.env.ptrs.as_ptr());
        }
        errno = nix::errno::Errno::last_raw();
        match errno {
            libc::EACCES => refused = true,
            libc::ENOENT
            | libc::ENOTDIR
            | libc::ESTALE
            | libc::ELOOP
            | libc::ENAMETOOLONG
            | libc::ENODEV
            | libc::ETIMEDOUT => {}
            _ => return errno,
        }
    }
    if refused {
        libc::EACCES
    } else {
        errno
    }
}

/// The reaper's life: waits for the shell's end or the server's `SIGTERM`, then kills and
/// reaps everything of the call and exits with the shell's status.
fn reap(shell: nix::unistd::Pid, watched: &nix::sys::signal::SigSet) -> ! {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let mut status = None;
    while status.is_none() {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(s @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, ..))) if pid == shell => {
                        status = Some(s)
                    }
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            },
            Ok(_) => break,
            Err(_) => {}
        }
    }
    // Until no child is left (`ECHILD`); each round kills again what a dying process forked.
    loop {
        let _ = kill(nix::unistd::Pid::from_raw(-1), Signal::SIGKILL);
        if waitpid(None, None).is_err() {
            break;
        }
    }
    match status {
        // SAFETY: _exit ends this process without running anything of the server's.
        Some(WaitStatus::Exited(_, code)) => unsafe { libc::_exit(code) },
        Some(WaitStatus::Signaled(_, sig, _)) => {
            // SAFETY: the default action for the signal that ended the shell, then that
            // signal: the server sees the shell's own end.
            unsafe {
                let _ = nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl);
            }
            let mut only = nix::sys::signal::SigSet::empty();
            only.add(sig);
            let _ = only.thread_unblock();
            let _ = nix::sys::signal::raise(sig);
            // SAFETY: as above.
            unsafe { libc::_exit(128 + sig as i32) }
        }
        // SAFETY: as above; ended by the server, which reports the timeout or cancel itself.
        _ => unsafe { libc::_exit(128 + libc::SIGKILL) },
    }
}

/// Empties the ambient set and drops from the bounding set every capability but
/// [`KEPT_CAPS`], so the `execve` that follows leaves even a root command without them. A
/// server that is not root holds none: the drops fail with `EPERM` and change nothing.
/// Async-signal-safe (two prctl calls in a loop).
fn drop_capabilities() {
    // SAFETY: prctl with integer arguments only; it touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    }
    for cap in (0..CAP_NUMBERS).filter(|c| !KEPT_CAPS.contains(c)) {
        // SAFETY: as above.
        unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
    }
}

/// What the start-up check saw.
struct Probe {
    landlock: bool,
    abi: Option<i32>,
    seccomp: bool,
    no_new_privs: bool,
    reason: Option<String>,
}

/// Applies the whole policy to a short-lived thread and checks its effect: a write outside
/// the roots refused, a TCP socket refused (network off), a Unix socket allowed.
fn probe(policy: &Policy, workspace: &Path, data: &Path) -> Probe {
    let ruleset = match policy.ruleset(&split_around(workspace, &policy.protected, workspace)) {
        Ok(r) => r,
        Err(e) => return Probe::failed(None, format!("Landlock: {e}")),
    };
    let filters = Arc::clone(&policy.filters);
    let (network, unix_sockets) = (policy.network, policy.unix_sockets);
    let forbidden = data.join(".sandbox-probe");
    let run = move || -> Probe {
        let status = match ruleset.restrict_self() {
            Ok(s) => s,
            Err(e) => return Probe::failed(None, format!("Landlock: {e}")),
        };
        let abi = match status.landlock {
            LandlockStatus::Available { effective_abi, kernel_abi } => Some(kernel_abi.unwrap_or(effective_abi as i32)),
            _ => None,
        };
        let mut reason = None;
        let mut landlock = status.ruleset != RulesetStatus::NotEnforced;
        if !landlock {
            reason = Some(match status.landlock {
                LandlockStatus::NotEnabled => "Landlock is not enabled in this kernel".to_string(),
                LandlockStatus::NotImplemented => "this kernel has no Landlock".to_string(),
                _ => "Landlock did not enforce the ruleset".to_string(),
            });
        } else if std::fs::write(&forbidden, b"").is_ok() {
            // A file created in the server's data directory must have been refused.
            let _ = std::fs::remove_file(&forbidden);
            landlock = false;
            reason = Some("Landlock let a write outside the roots through".into());
        }
        if landlock && abi.is_some_and(|a| a < 6) {
            reason = Some(format!(
                "Landlock ABI {} lacks signal and abstract-socket scoping (ABI 6, Linux 6.12)",
                abi.unwrap_or(0)
            ));
        }
        let mut seccomp = filters.iter().all(|f| seccompiler::apply_filter(f).is_ok());
        if seccomp {
            let tcp = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
            let unix = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None);
            let refused =
                |r: &io::Result<socket2::Socket>| matches!(r, Err(e) if e.raw_os_error() == Some(libc::EPERM));
            if unix_sockets == refused(&unix) || network == refused(&tcp) {
                seccomp = false;
            }
        }
        if !seccomp && reason.is_none() {
            reason = Some("seccomp did not apply the filter".into());
        }
        Probe { landlock, abi, seccomp, no_new_privs: status.no_new_privs, reason }
    };
    match std::thread::Builder::new().name("sandbox-probe".into()).stack_size(256 << 10).spawn(run) {
        Ok(t) => t.join().unwrap_or_else(|_| Probe::failed(None, "the sandbox check panicked".into())),
        Err(e) => Probe::failed(None, format!("cannot start the sandbox check: {e}")),
    }
}

impl Probe {
    fn failed(abi: Option<i32>, reason: String) -> Probe {
        Probe { landlock: false, abi, seccomp: false, no_new_privs: false, reason: Some(reason) }
    }
}

/// The calls that create a file or set its mode, with the index of their mode argument.
const MODE_CALLS: &[(i64, u8)] = &[
    (libc::SYS_fchmod, 1),
    (libc::SYS_fchmodat, 2),
    (libc::SYS_fchmodat2, 2),
    (libc::SYS_openat, 3),
    (libc::SYS_mknodat, 2),
];
/// Their older forms, which only some architectures have.
#[cfg(target_arch = "x86_64")]
const LEGACY_MODE_CALLS: &[(i64, u8)] =
    &[(libc::SYS_chmod, 1), (libc::SYS_creat, 1), (libc::SYS_open, 2), (libc::SYS_mknod, 1)];
#[cfg(not(target_arch = "x86_64"))]
const LEGACY_MODE_CALLS: &[(i64, u8)] = &[];

/// What the system-call filter allows beyond its fixed rules.
struct Rules {
    /// Sockets other than Unix ones (`CASHCODE_SANDBOX_NETWORK`).
    network: bool,
    /// `socket(AF_UNIX)` (`CASHCODE_SANDBOX_UNIX_SOCKETS`); `socketpair` is always allowed.
    unix_sockets: bool,
    /// The server runs as root: extended attributes refused too (`security.capability`).
    root: bool,
}

/// The BPF programs every confined command gets, refusing with `EPERM`: sockets (Unix ones
/// unless `unix_sockets`, the others unless `network`; pathname Unix sockets reach the owner's
/// session bus, agents and docker, which Landlock does not scope); namespaces, mounts and
/// io_uring (which can open sockets of its own), kernel administration, keyrings and
/// `open_by_handle_at` (which skips path checks); SysV IPC (its objects are shared by every
/// process of the host's IPC namespace); `TIOCSTI`/`TIOCLINUX` (typing into a terminal);
/// creating or changing a file to a setuid/setgid mode, and for a root server setting
/// extended attributes (file capabilities). `clone3` and `openat2`, whose flags or mode a filter
/// cannot read, are answered `ENOSYS` so the C library falls back to `clone` and programs to
/// `openat`, which it can. A process of another system-call ABI (i386) is killed: its numbers
/// would bypass the rules.
fn build_filters(rules: &Rules) -> Result<Vec<BpfProgram>, String> {
    let arch: TargetArch = std::env::consts::ARCH.try_into().map_err(|e| format!("{e:?}"))?;
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
    };
    let one = |c: SeccompCondition| SeccompRule::new(vec![c]).map_err(|e| e.to_string());
    let program = |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32| -> Result<BpfProgram, String> {
        let rules = with_x32(rules, arch);
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch)
            .map_err(|e| e.to_string())?;
        BpfProgram::try_from(filter).map_err(|e| e.to_string())
    };
    // Any of `values` in argument `arg` (an `Eq` each), or any of `bits` set in it.
    let any_eq = |arg: u8, values: &[u64]| -> Result<Vec<SeccompRule>, String> {
        values.iter().map(|&v| one(cond(arg, SeccompCmpOp::Eq, v)?)).collect()
    };
    let any_bit = |arg: u8, bits: &[u64]| -> Result<Vec<SeccompRule>, String> {
        bits.iter().map(|&b| one(cond(arg, SeccompCmpOp::MaskedEq(b), b)?)).collect()
    };

    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_io_uring_setup,
        // Kernel administration and keyrings (the session keyring is the server's too).
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_open_by_handle_at,
        // SysV IPC: segments, queues and semaphores of other processes on the host.
        libc::SYS_shmget,
        libc::SYS_shmat,
        libc::SYS_shmdt,
        libc::SYS_shmctl,
        libc::SYS_msgget,
        libc::SYS_msgsnd,
        libc::SYS_msgrcv,
        libc::SYS_msgctl,
        libc::SYS_semget,
        libc::SYS_semop,
        libc::SYS_semtimedop,
        libc::SYS_semctl,
    ]
    .into_iter()
    .map(|n| (n, Vec::new()))
    .collect();
    let namespaces = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
    ];
    denied.insert(libc::SYS_clone, any_bit(0, &namespaces.map(|f| f as u64))?);
    // An ioctl request is a `c_ulong` in glibc and a `c_int` in musl.
    #[allow(clippy::unnecessary_cast)]
    let typing = [libc::TIOCSTI as u64, libc::TIOCLINUX as u64];
    denied.insert(libc::SYS_ioctl, any_eq(1, &typing)?);
    // The mode argument of each call that creates a file or sets its mode.
    let suid = [libc::S_ISUID as u64, libc::S_ISGID as u64];
    for &(call, mode_arg) in MODE_CALLS.iter().chain(LEGACY_MODE_CALLS) {
        denied.insert(call, any_bit(mode_arg, &suid)?);
    }
    if rules.root {
        for call in [libc::SYS_setxattr, libc::SYS_lsetxattr, libc::SYS_fsetxattr, SYS_SETXATTRAT] {
            denied.insert(call, Vec::new());
        }
    }
    match (rules.network, rules.unix_sockets) {
        (false, false) => drop(denied.insert(libc::SYS_socket, Vec::new())),
        (false, true) => {
            drop(denied.insert(libc::SYS_socket, vec![one(cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?)?]))
        }
        (true, false) => drop(denied.insert(libc::SYS_socket, any_eq(0, &[libc::AF_UNIX as u64])?)),
        (true, true) => {}
    }
    let unknown = BTreeMap::from([(libc::SYS_clone3, Vec::new()), (libc::SYS_openat2, Vec::new())]);
    Ok(vec![program(denied, libc::EPERM)?, program(unknown, libc::ENOSYS)?])
}

/// On x86-64 with the x32 ABI enabled, the same rules again under the x32 numbers. (Only
/// then: the kernel runs every filter over every system call number when it is attached, so a
/// longer program costs each `exec` call.)
fn with_x32(rules: BTreeMap<i64, Vec<SeccompRule>>, arch: TargetArch) -> BTreeMap<i64, Vec<SeccompRule>> {
    if !matches!(arch, TargetArch::x86_64) || !x32_enabled() {
        return rules;
    }
    let x32: Vec<(i64, Vec<SeccompRule>)> = rules.iter().map(|(n, r)| (n | X32_SYSCALL_BIT, r.clone())).collect();
    rules.into_iter().chain(x32).collect()
}

/// Does this kernel run x32 system calls? (`getpid` under the x32 number: `ENOSYS` if not.)
fn x32_enabled() -> bool {
    // SAFETY: getpid takes no arguments and touches no memory.
    unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) >= 0 }
}

/// Is the server process non-dumpable?
fn server_non_dumpable() -> bool {
    nix::sys::prctl::get_dumpable().is_ok_and(|d| !d)
}

/// Makes the server non-dumpable: processes of the same uid can no longer ptrace it or read
/// its `/proc/<pid>/{mem,environ,fd}` (and it leaves no core dump holding secrets). `execve`
/// resets the flag, so `main` calls this after the start-up re-exec.
pub fn protect_server_process() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("cashcode: warning: cannot make the server non-dumpable: {e}");
    }
}

/// The server's own directories and the credentials under `$HOME`.
fn protected_paths(dirs: &ServerDirs, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [dirs.data, dirs.memory, dirs.config, dirs.log].iter().map(|p| canonical(p)).collect();
    if let Some(h) = home {
        out.extend(HOME_SECRETS.iter().map(|s| canonical(&h.join(s))));
    }
    out.sort();
    out.dedup();
    out
}

/// The system roots, the toolchains on `PATH` and the extra read roots, each split around the
/// protected paths, without roots nested in others.
fn read_roots(settings: &SandboxConfig, dirs: &ServerDirs, protected: &[PathBuf]) -> Vec<PathBuf> {
    let home = settings.env_home.as_deref().map(canonical);
    let mut roots: Vec<PathBuf> = SYSTEM_ROOTS
        .iter()
        .chain(KERNEL_ROOTS)
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .map(|p| canonical(&p))
        .collect();
    // `PATH` often names one directory twice or through a link (`/bin` and `/usr/bin`):
    // each directory is looked through once, and each link target's directory resolved once.
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut resolved: HashMap<PathBuf, Option<PathBuf>> = HashMap::new();
    for entry in std::env::split_paths(settings.env_path.as_deref().unwrap_or("")) {
        let Ok(entry) = entry.canonicalize() else { continue };
        if seen.contains(&entry) {
            continue;
        }
        roots.push(installation(&entry, home.as_deref()));
        roots.extend(symlinked_installations(&entry, home.as_deref(), &mut resolved));
        seen.push(entry);
    }
    roots.extend(settings.read.iter().map(|p| canonical(p)));
    let mut split: Vec<PathBuf> = roots.iter().flat_map(|r| split_around(r, protected, dirs.workspace)).collect();
    split.sort();
    split.dedup();
    // Sorted, a root's descendants follow it: keep only the outermost.
    let mut out: Vec<PathBuf> = Vec::new();
    for r in split {
        if !out.last().is_some_and(|last| r.starts_with(last)) {
            out.push(r);
        }
    }
    out
}

/// The installation a `PATH` directory belongs to: `X` for `X/bin` or `X/sbin`, else the
/// directory itself; never `/`, and never for a directory in `$HOME` (or above it), where the
/// directory itself is used: `~/.local/bin`'s parent holds keyrings, history and app state.
fn installation(dir: &Path, home: Option<&Path>) -> PathBuf {
    let parent = match dir.file_name().and_then(|n| n.to_str()) {
        Some("bin" | "sbin") => dir.parent(),
        _ => None,
    };
    match parent {
        Some(p) if p != Path::new("/") && !home.is_some_and(|h| p.starts_with(h) || h.starts_with(p)) => {
            p.to_path_buf()
        }
        _ => dir.to_path_buf(),
    }
}

/// The installations of the symlinked executables in `dir`, a canonical `PATH` directory (a
/// venv's `python3` points into its base install, which holds the standard library). A link to
/// another name in `dir` adds nothing: that name's installation is `dir`'s own, and if it is a
/// link itself it is looked at in its turn.
fn symlinked_installations(
    dir: &Path,
    home: Option<&Path>,
    resolved: &mut HashMap<PathBuf, Option<PathBuf>>,
) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = Vec::new();
    for e in entries.flatten().take(MAX_DIR_ENTRIES) {
        if !e.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let Ok(target) = std::fs::read_link(e.path()) else { continue };
        let mut parts = target.components();
        if matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None)) {
            continue;
        }
        let Some(parent) = final_directory(&e.path(), resolved) else { continue };
        let inst = installation(&parent, home);
        if !out.contains(&inst) {
            out.push(inst);
        }
    }
    out
}

/// Links followed from one executable before giving up (the kernel's own limit is 40).
const MAX_LINK_HOPS: usize = 40;

/// The canonical directory holding what `link` finally points to: the same answer as
/// `link.canonicalize()?.parent()`, with each directory along the way canonicalized once for the
/// whole scan (`resolved`) instead of once per link: a `/usr/bin` holds hundreds of links into a
/// few directories (`/etc/alternatives`, a toolchain's `bin`).
fn final_directory(link: &Path, resolved: &mut HashMap<PathBuf, Option<PathBuf>>) -> Option<PathBuf> {
    // `current`'s directory is canonical; only its last component may still be a link.
    let mut current = link.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        let dir = current.parent()?;
        let target = match std::fs::read_link(&current) {
            Ok(t) => t,
            // Not a link: `current` is the file itself.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => return Some(dir.to_path_buf()),
            Err(_) => return None,
        };
        let next = dir.join(&target);
        let (Some(next_dir), Some(name)) = (next.parent(), next.file_name()) else {
            // A target ending in `..`: resolved whole, as `canonicalize` would.
            return next.canonicalize().ok()?.parent().map(Path::to_path_buf);
        };
        let canonical_dir =
            resolved.entry(next_dir.to_path_buf()).or_insert_with(|| next_dir.canonicalize().ok()).clone()?;
        current = canonical_dir.join(name);
    }
    None
}

/// `root` itself when no protected path lies in it; nothing when it lies in one (unless it is
/// `keep`, the workspace, which the owner may have put there); else its children, each split
/// again, so a root holding the server's data grants everything else. Symlinked children are
/// left out (a rule on one would grant its target).
fn split_around(root: &Path, protected: &[PathBuf], keep: &Path) -> Vec<PathBuf> {
    if protected.iter().any(|p| root.starts_with(p)) && root != keep {
        return Vec::new();
    }
    if !protected.iter().any(|p| p.starts_with(root) && p != root) {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    let mut out = Vec::new();
    for e in entries.flatten().take(MAX_DIR_ENTRIES) {
        if e.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        out.extend(split_around(&e.path(), protected, keep));
    }
    out
}

/// The path with symlinks resolved, or as given when it does not exist (yet).
fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reaper starts the command itself (`start_command`): found on the command's `PATH`
    /// as `execvp` would (a candidate it may not run is skipped), confined, and a command that
    /// cannot start fails the spawn with the reason, as std's own `execvp` failure does.
    #[test]
    fn the_reaper_runs_the_command_as_execvp_would_and_reports_why_not() {
        let base = std::env::temp_dir().join(format!("cc-reaper-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (ws, data) = (base.join("ws"), base.join("data"));
        for d in [ws.join("a"), ws.join("b"), data.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        let ws = ws.canonicalize().unwrap();
        let sandbox = Sandbox::with_defaults(&data, &ws);
        assert!(sandbox.policy.as_ref().is_some_and(|p| p.scoped_signals), "{:?}", sandbox.status);
        use std::os::unix::fs::PermissionsExt;
        let tool = |dir: &str, mode: u32| {
            let f = ws.join(dir).join("tool");
            std::fs::write(&f, format!("#!/bin/sh\necho ran-{dir} \"$1\" \"$GREETING\" \"$TMPDIR\"\n")).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        tool("a", 0o644);
        tool("b", 0o755);
        let run = |program: &str, path: &str| {
            let mut cmd = Command::new(program);
            cmd.arg("one arg").env("PATH", path).env("GREETING", "hi").current_dir(&ws);
            let confined = sandbox.prepare(&ws, "chat-1").unwrap().apply(&mut cmd);
            assert!(confined.reaped);
            cmd.output()
        };
        let dirs = format!("{0}/a:{0}/b:/usr/bin:/bin", ws.display());
        let out = run("tool", &dirs).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.starts_with("ran-b one arg hi ") && text.contains("/sandbox/tmp/"), "{text:?} {out:?}");
        // Confined: the server's data directory is out of reach.
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("ls {} 2>&1", data.join("sandbox/tmp").display()));
        let _c = sandbox.prepare(&ws, "chat-1").unwrap().apply(&mut cmd);
        let out = String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned();
        assert!(out.contains("Permission denied"), "{out}");
        let refused = run("tool", &format!("{}/a", ws.display())).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied, "{refused}");
        let missing = run("no-such-tool", &dirs).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound, "{missing}");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn installation_of_path_entries() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(installation(Path::new("/usr/local/bin"), home), PathBuf::from("/usr/local"));
        assert_eq!(installation(Path::new("/opt/node/bin"), home), PathBuf::from("/opt/node"));
        assert_eq!(installation(Path::new("/home/u/.cargo/bin"), home), PathBuf::from("/home/u/.cargo/bin"));
        assert_eq!(installation(Path::new("/home/u/.local/bin"), home), PathBuf::from("/home/u/.local/bin"));
        // Never `/` or `$HOME` itself: the entry alone.
        assert_eq!(installation(Path::new("/bin"), home), PathBuf::from("/bin"));
        assert_eq!(installation(Path::new("/home/u/bin"), home), PathBuf::from("/home/u/bin"));
        assert_eq!(installation(Path::new("/home/bin"), home), PathBuf::from("/home/bin"));
        assert_eq!(installation(Path::new("/home/u/.pyenv/shims"), home), PathBuf::from("/home/u/.pyenv/shims"));
    }

    #[test]
    fn a_root_holding_a_protected_directory_is_split_around_it() {
        let base = std::env::temp_dir().join(format!("cc-split-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for d in ["tool/bin", "tool/share/data", "tool/share/doc", "ws"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("tool/README"), "").unwrap();
        std::os::unix::fs::symlink("/etc", base.join("tool/link")).unwrap();
        let protected = vec![base.join("tool/share/data")];
        let ws = base.join("ws");
        let mut got = split_around(&base.join("tool"), &protected, &ws);
        got.sort();
        assert_eq!(got, vec![base.join("tool/README"), base.join("tool/bin"), base.join("tool/share/doc")]);
        assert_eq!(split_around(&base.join("tool/share/data"), &protected, &ws), Vec::<PathBuf>::new());
        assert_eq!(split_around(&base.join("tool/bin"), &protected, &ws), vec![base.join("tool/bin")]);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn link_targets_resolve_as_canonicalize_does() {
        let base = std::env::temp_dir().join(format!("cc-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for d in ["bin", "alt", "opt/tool/bin", "opt/tool/lib"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("opt/tool/bin/real"), "").unwrap();
        std::fs::write(base.join("bin/plain"), "").unwrap();
        let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, base.join(at)).unwrap();
        link("plain", "bin/same-dir");
        link(base.join("alt/tool").to_str().unwrap(), "bin/via-alternatives");
        link("../opt/tool/bin/real", "alt/tool");
        link("../opt/./tool/lib/../bin/real", "bin/dotted");
        link("../opt/tool", "bin/to-a-directory");
        link("../opt/tool/lib/..", "bin/up");
        link("missing", "bin/dangling");
        link("loop-b", "bin/loop-a");
        link("loop-a", "bin/loop-b");
        let dir = base.join("bin").canonicalize().unwrap();
        let mut resolved = HashMap::new();
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let expected = e.path().canonicalize().ok().and_then(|p| p.parent().map(Path::to_path_buf));
            assert_eq!(final_directory(&e.path(), &mut resolved), expected, "{}", e.path().display());
        }
        let (opt, tool) = (base.join("opt").canonicalize().unwrap(), base.join("opt/tool").canonicalize().unwrap());
        let mut got = symlinked_installations(&dir, None, &mut resolved);
        got.sort();
        // Two links into `opt/tool/bin` give one installation; the same-directory link none.
        assert_eq!(got, vec![opt, tool]);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn filters_build_for_this_system() {
        let rules = |network, unix_sockets, root| Rules { network, unix_sockets, root };
        let (off, on) =
            (build_filters(&rules(false, true, false)).unwrap(), build_filters(&rules(true, true, false)).unwrap());
        assert_eq!((off.len(), on.len()), (2, 2));
        assert!(off[0].len() > on[0].len(), "the socket rule is in the first program");
        let root = build_filters(&rules(true, true, true)).unwrap();
        assert!(root[0].len() > on[0].len(), "the extended-attribute rules are in the first program");
    }
}
