package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/safefs/safefs/fs"
)

// mountConfig is what `safefs mount` was asked for: the fs options plus
// the logger settings, which belong to the command, not to fs.
type mountConfig struct {
	fs          fs.Options
	logFormat   string
	logLevel    string
	logFile     string // "" logs to stderr (or syslog in the background)
	foreground  bool   // the fstab form stays in the foreground
	metricsAddr string // "": no metrics endpoint
	auditFile   string // "": no audit trail
	pprof       string // HOST:PORT or unix:PATH serving net/http/pprof; "" for off
	kernelLocks bool   // locks=kernel: script locks decided by the kernel
	// loseOnUnlock: lose_updates_on_unlock, without which locks=kernel
	// is refused (a script that unlocks before it closes loses updates).
	loseOnUnlock bool
	cluster      clusterConfig
	given        givenOptions
}

// givenOptions records the options whose defaults depend on others, when
// the command line set them (settleCache).
type givenOptions struct{ cache, passthrough bool }

func defaultMountConfig() mountConfig {
	return mountConfig{fs: fs.DefaultOptions(), logFormat: "console", logLevel: "info", cluster: defaultClusterConfig()}
}

// mountOption is one -o option. The table drives parsing and --help, so
// the two cannot disagree.
type mountOption struct {
	name  string
	value string // placeholder shown in --help; "" for an option without a value
	help  string
	show  func(c mountConfig) string // value in c; --help shows it for the defaults
	set   func(c *mountConfig, v string) error
}

var mountOptions = []mountOption{
	{name: "allow_other", help: "let users other than the mounter in",
		show: func(c mountConfig) string { return onOff(c.fs.AllowOther) },
		set:  func(c *mountConfig, _ string) error { c.fs.AllowOther = true; return nil }},
	{name: "default_permissions", help: "kernel permission checks; always on, accepted for mount(8) habits",
		show: func(mountConfig) string { return "on" },
		set:  func(*mountConfig, string) error { return nil }},
	{name: "ro", help: "mount read-only",
		show: func(c mountConfig) string { return onOff(c.fs.ReadOnly) },
		set:  func(c *mountConfig, _ string) error { c.fs.ReadOnly = true; return nil }},
	{name: "rw", help: "mount read-write",
		show: func(c mountConfig) string { return onOff(!c.fs.ReadOnly) },
		set:  func(c *mountConfig, _ string) error { c.fs.ReadOnly = false; return nil }},
	{name: "lock_timeout", value: "DURATION", help: "how long a commit waits for its file's lock (Go duration > 0)",
		show: func(c mountConfig) string { return c.fs.LockTimeout.String() },
		set:  setLockTimeout},
	{name: "max_waiters", value: "N", help: "commits that may wait for one file (>= 1); more fail with EAGAIN",
		show: func(c mountConfig) string { return strconv.Itoa(c.fs.MaxWaiters) },
		set:  setMaxWaiters},
	{name: "durability", value: "full|none", help: "full: fsync staging file, directory and journal",
		show: func(c mountConfig) string { return durabilityName(c.fs.Durable) },
		set:  setDurability},
	{name: "staging_pool", value: "N", help: "empty staging files made ahead of the opens that need them (0: each open creates its own)",
		show: func(c mountConfig) string { return strconv.Itoa(c.fs.StagingPool) },
		set:  func(c *mountConfig, v string) error { return setCount(&c.fs.StagingPool, v, 0) }},
	{name: "passthrough", value: "off|read|write", help: "read: a reader alone on a file's version reads it through the kernel from the backing file (FUSE passthrough; needs root and kernel 6.9+, else reads stay as without it), not through the daemon; write (experimental, cache=version only): read, and a write-only truncating writer alone on its file writes its staging file through the kernel; default off with cache=direct",
		show: func(c mountConfig) string { return passthroughName(c.fs.Passthrough, c.fs.PassthroughWrite) },
		set:  setPassthrough},
	{name: "locks", value: "kernel|daemon", help: "daemon: flock and fcntl locks taken through the mount are decided by the daemon, per logical file, and a release publishes what the releasing process wrote (in cluster mode in etcd, across hosts); kernel (for measurements): the kernel decides them and the daemon never hears of an unlock, so a script that unlocks before it closes loses updates: refused without lose_updates_on_unlock; implies cache=direct",
		show: locksName, set: setLocks},
	{name: "lose_updates_on_unlock", help: "accept locks=kernel, under which a script that releases its lock before it closes its file loses updates",
		show: func(c mountConfig) string { return onOff(c.loseOnUnlock) },
		set:  func(c *mountConfig, _ string) error { c.loseOnUnlock = true; return nil }},
	{name: "cache", value: "direct|version", help: "version: readers alone on a file's version read it through the kernel's page cache, on a kernel inode of that version; writers stay direct; with passthrough=read, readers of versions of 1 MiB or more read the version's backing file (implies locks=daemon); direct: every open is direct I/O on one kernel inode per file (the default in cluster mode and with locks=kernel)",
		show: func(c mountConfig) string { return cacheName(c.fs.VersionCache) },
		set:  setCache},
	{name: "kill_check", value: "on|off", help: "a writer killed by a signal does not commit",
		show: func(c mountConfig) string { return onOff(c.fs.KillCheck) },
		set:  setKillCheck},
	{name: "append_publish", value: "DURATION|off", help: "the complete lines an O_APPEND descriptor writes are published (visible to other processes, and kept if its process is killed) at most this long after they are written, while it stays open; a partial last line waits for its newline, a close, fsync or unlock; off: only at close, fsync and unlock, and an appender killed by a signal keeps nothing it had not published (Go duration, at most 1h)",
		show: func(c mountConfig) string { return durationOrOff(c.fs.AppendPublish) },
		set:  setAppendPublish},
	{name: "max_files_per_user", value: "N", help: "files one non-root uid may hold open through the mount (EMFILE beyond); 0: half of what the descriptor limit allows",
		show: func(c mountConfig) string { return strconv.Itoa(c.fs.MaxFilesPerUser) },
		set:  setMaxFilesPerUser},
	{name: "rejected_max", value: "SIZE", help: "bytes kept in .safefs/rejected in all; beyond, a failed commit's bytes are dropped (K, M, G suffixes)",
		show: func(c mountConfig) string { return sizeName(c.fs.RejectedMax, fs.DefaultRejectedMax) },
		set:  func(c *mountConfig, v string) error { return setSize(&c.fs.RejectedMax, v) }},
	{name: "rejected_user_max", value: "SIZE", help: "bytes kept in .safefs/rejected per writing uid",
		show: func(c mountConfig) string { return sizeName(c.fs.RejectedUserMax, fs.DefaultRejectedUserMax) },
		set:  func(c *mountConfig, v string) error { return setSize(&c.fs.RejectedUserMax, v) }},
	{name: "metrics", value: "ADDR", help: "serve Prometheus metrics on http://ADDR/metrics (host:port, which every local user can read, or unix:PATH, a socket only root can read; off by default)",
		show: func(c mountConfig) string { return offIfEmpty(c.metricsAddr) },
		set:  setMetrics},
	{name: "audit", value: "FILE", help: "append one JSON line per commit and rejected commit to FILE; SIGHUP reopens it (off by default)",
		show: func(c mountConfig) string { return offIfEmpty(c.auditFile) },
		set:  setAudit},
	{name: "rmw", value: "off|auto|GLOB[:GLOB...]", help: "read-modify-write sessions: an open of a selected file waits until another thread's read and rewrite of it is done; auto: files and programs seen reading then rewriting without a lock (their requests of a class judged read-only do not wait); GLOB: paths below the mount root (no '/': the name in any directory)",
		show: rmwName, set: setRMW},
	{name: "rmw_hold", value: "DURATION", help: "how long a session outlives its holder's last close without a write",
		show: func(c mountConfig) string { return c.fs.RMWHold.String() },
		set:  func(c *mountConfig, v string) error { return setDuration(&c.fs.RMWHold, v) }},
	{name: "rmw_wait", value: "DURATION", help: "longest wait for another thread's session; then the open goes on without one",
		show: func(c mountConfig) string { return c.fs.RMWWait.String() },
		set:  func(c *mountConfig, v string) error { return setDuration(&c.fs.RMWWait, v) }},
	{name: "cluster", value: "etcd", help: "serve BACKING together with other safefs daemons: commit locks through etcd",
		show: func(c mountConfig) string { return offIfEmpty(c.cluster.mode) },
		set:  setClusterMode},
	{name: "etcd", value: "URL[+URL...]", help: "etcd endpoints for cluster=etcd ('+' separates several, as ',' separates options)",
		show: func(c mountConfig) string { return orNone(strings.Join(c.cluster.endpoints, "+")) },
		set:  setEtcd},
	{name: "etcd_cacert", value: "FILE", help: "CA certificates (PEM) that etcd's server certificate must chain to; https:// endpoints without it use the system's",
		show: func(c mountConfig) string { return orNone(c.cluster.auth.cacert) },
		set:  setFile(func(c *mountConfig) *string { return &c.cluster.auth.cacert })},
	{name: "etcd_cert", value: "FILE", help: "client certificate (PEM) shown to etcd over https://; needs etcd_key",
		show: func(c mountConfig) string { return orNone(c.cluster.auth.cert) },
		set:  setFile(func(c *mountConfig) *string { return &c.cluster.auth.cert })},
	{name: "etcd_key", value: "FILE", help: "private key (PEM) of etcd_cert",
		show: func(c mountConfig) string { return orNone(c.cluster.auth.key) },
		set:  setFile(func(c *mountConfig) *string { return &c.cluster.auth.key })},
	{name: "etcd_user", value: "NAME", help: "etcd user (etcd with authentication on); needs etcd_password_file",
		show: func(c mountConfig) string { return orNone(c.cluster.auth.user) },
		set:  setEtcdUser},
	{name: "etcd_password_file", value: "FILE", help: "file holding etcd_user's password on one line; refused if group or others may read it (chmod 600)",
		show: func(c mountConfig) string { return orNone(c.cluster.auth.passwordFile) },
		set:  setFile(func(c *mountConfig) *string { return &c.cluster.auth.passwordFile })},
	{name: "cluster_name", value: "NAME", help: "the cluster's name: its etcd keys are below /safefs/NAME/; every daemon of one BACKING uses the same",
		show: func(c mountConfig) string { return c.cluster.name },
		set:  setClusterName},
	{name: "lease_ttl", value: "DURATION", help: "etcd lease of this daemon: its locks outlive it (killed, cut off) by at most this long",
		show: func(c mountConfig) string { return c.cluster.leaseTTL.String() },
		set:  setLeaseTTL},
	{name: "node", value: "NAME", help: "this daemon's name in the cluster (its state is .safefs/nodes/NAME; none: the host name)",
		show: func(c mountConfig) string { return orNone(c.cluster.node) },
		set:  setNode},
	{name: "debug", help: "trace FUSE requests",
		show: func(c mountConfig) string { return onOff(c.fs.Debug) },
		set:  func(c *mountConfig, _ string) error { c.fs.Debug = true; return nil }},
	{name: "log_format", value: "console|json", help: "log format on stderr",
		show: func(c mountConfig) string { return c.logFormat },
		set:  setLogFormat},
	{name: "log_level", value: "debug|info|warn|error", help: "lowest level logged",
		show: func(c mountConfig) string { return c.logLevel },
		set:  setLogLevel},
	{name: "log_file", value: "PATH", help: "append the log to PATH instead of stderr (or syslog in the background)",
		show: func(c mountConfig) string { return orNone(c.logFile) },
		set:  setLogFile},
	{name: "pprof", value: "HOST:PORT|unix:PATH", help: "serve net/http/pprof on this loopback address, which every local user can read, or on a socket only root can read (profiling); an address in use fails the mount (exit 2)",
		show: func(c mountConfig) string { return orNone(c.pprof) },
		set:  setPprof},
	{name: "foreground", help: "fstab form (safefs BACKING MOUNTPOINT): stay in the foreground; safefs mount always does",
		show: func(c mountConfig) string { return onOff(c.foreground) },
		set:  func(c *mountConfig, _ string) error { c.foreground = true; return nil }},
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func offIfEmpty(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func durabilityName(durable bool) string {
	if durable {
		return "full"
	}
	return "none"
}

func setLockTimeout(c *mountConfig, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return errors.New("want a Go duration > 0, such as 10s or 500ms")
	}
	c.fs.LockTimeout = d
	return nil
}

// setAppendPublish sets append_publish: a delay, or off (0 too).
func setAppendPublish(c *mountConfig, v string) error {
	if v == "off" || v == "0" {
		c.fs.AppendPublish = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > time.Hour {
		return errors.New("want off or a Go duration from 1ms to 1h, such as 1s or 500ms")
	}
	c.fs.AppendPublish = d
	return nil
}

func durationOrOff(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return d.String()
}

func setDuration(dst *time.Duration, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return errors.New("want a Go duration > 0, such as 1s or 500ms")
	}
	*dst = d
	return nil
}

// setRMW parses rmw=off|auto|GLOB[:GLOB...]; auto may be one of the
// items, with globs.
func setRMW(c *mountConfig, v string) error {
	if v == "off" {
		c.fs.RMWAuto, c.fs.RMWGlobs = false, nil
		return nil
	}
	auto, globs := false, []string{}
	for _, item := range strings.Split(v, ":") {
		if item == "auto" {
			auto = true
			continue
		}
		globs = append(globs, item)
	}
	if err := fs.CheckRMWGlobs(globs); err != nil {
		return err
	}
	c.fs.RMWAuto, c.fs.RMWGlobs = auto, nil
	if len(globs) > 0 {
		c.fs.RMWGlobs = globs
	}
	return nil
}

func rmwName(c mountConfig) string {
	var items []string
	if c.fs.RMWAuto {
		items = append(items, "auto")
	}
	items = append(items, c.fs.RMWGlobs...)
	if len(items) == 0 {
		return "off"
	}
	return strings.Join(items, ":")
}

func setMaxWaiters(c *mountConfig, v string) error { return setCount(&c.fs.MaxWaiters, v, 1) }

func setMaxFilesPerUser(c *mountConfig, v string) error {
	return setCount(&c.fs.MaxFilesPerUser, v, 0)
}

// setCount parses a whole number >= least.
func setCount(dst *int, v string, least int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		return fmt.Errorf("want a whole number >= %d", least)
	}
	*dst = n
	return nil
}

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"G", 30}, {"M", 20}, {"K", 10}, {"", 0}}

// setSize parses a byte count with an optional K, M or G suffix (powers
// of 1024), > 0.
func setSize(dst *int64, v string) error {
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 || n > (1<<62)>>u.shift {
			break
		}
		*dst = n << u.shift
		return nil
	}
	return errors.New("want a size > 0 such as 1G, 256M or 4096")
}

// sizeName shows a size option's value (def when unset) in the largest
// unit that divides it.
func sizeName(n, def int64) string {
	if n <= 0 {
		n = def
	}
	for _, u := range sizeUnits {
		if n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func setDurability(c *mountConfig, v string) error {
	switch v {
	case "full":
		c.fs.Durable = true
	case "none":
		c.fs.Durable = false
	default:
		return errors.New("want full or none")
	}
	return nil
}

func setKillCheck(c *mountConfig, v string) error {
	switch v {
	case "on":
		c.fs.KillCheck = true
	case "off":
		c.fs.KillCheck = false
	default:
		return errors.New("want on or off")
	}
	return nil
}

func setLogFormat(c *mountConfig, v string) error {
	if _, err := newEncoder(v); err != nil {
		return err
	}
	c.logFormat = v
	return nil
}

func setLogLevel(c *mountConfig, v string) error {
	if _, err := parseLevel(v); err != nil {
		return err
	}
	c.logLevel = v
	return nil
}

func findOption(name string) (mountOption, bool) {
	for _, o := range mountOptions {
		if o.name == name {
			return o, true
		}
	}
	return mountOption{}, false
}

// parseOptionList applies one -o argument, "OPT[,OPT...]". Later options
// win, as with mount(8); empty items are ignored.
func parseOptionList(c *mountConfig, list string) error {
	for _, item := range strings.Split(list, ",") {
		if item == "" {
			continue
		}
		if err := applyOption(c, item); err != nil {
			return err
		}
	}
	return nil
}

func applyOption(c *mountConfig, item string) error {
	name, val, hasVal := strings.Cut(item, "=")
	if ignoredOption(item) {
		return nil
	}
	if why, ok := refusedOptions[name]; ok {
		return failf(exitUsage, "option %s is not supported: %s", name, why)
	}
	o, ok := findOption(name)
	switch {
	case !ok:
		return failf(exitUsage, "unknown option %q (see safefs mount --help)", name)
	case o.value == "" && hasVal:
		return failf(exitUsage, "option %s takes no value", name)
	case o.value != "" && !hasVal:
		return failf(exitUsage, "option %s needs a value: %s=%s", name, name, o.value)
	}
	if err := o.set(c, val); err != nil {
		return failf(exitUsage, "bad value for option %s: %q: %v", name, val, err)
	}
	return nil
}

// mountArgs is a parsed `safefs mount` command line.
type mountArgs struct {
	cfg        mountConfig
	backing    string
	mountpoint string
	help       bool
}

// parseMountArgs accepts -o anywhere, also after the positional arguments,
// because mount(8) and fstab helpers put it there.
func parseMountArgs(args []string) (mountArgs, error) {
	a := mountArgs{cfg: defaultMountConfig()}
	var pos []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		var err error
		switch {
		case arg == "-h" || arg == "--help":
			a.help = true
			return a, nil
		case arg == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case arg == "-f":
			a.cfg.foreground = true
		case arg == "-o":
			if i++; i == len(args) {
				return a, failf(exitUsage, "-o needs a value (see safefs mount --help)")
			}
			err = parseOptionList(&a.cfg, args[i])
		case strings.HasPrefix(arg, "-o"):
			err = parseOptionList(&a.cfg, arg[2:])
		case strings.HasPrefix(arg, "-") && arg != "-":
			err = failf(exitUsage, "unknown flag %s (see safefs mount --help)", arg)
		default:
			pos = append(pos, arg)
		}
		if err != nil {
			return a, err
		}
	}
	if len(pos) != 2 {
		return a, failf(exitUsage, "mount needs BACKING and MOUNTPOINT, got %d arguments (see safefs mount --help)", len(pos))
	}
	a.backing, a.mountpoint = pos[0], pos[1]
	if err := a.cfg.settleCache(); err != nil {
		return a, err
	}
	err := a.cfg.cluster.check()
	return a, err
}

// settleCache turns cache=version off where it cannot serve: in cluster
// mode (a version adopted from another daemon does not move a file's
// kernel inodes on) and with the kernel's locks (they would not exclude
// across a file's kernel inodes). Asked for there, it is refused.
// passthrough=read alone is the older experiment: on only if asked.
func (c *mountConfig) settleCache() error {
	kernelLocks := c.kernelLocks && c.cluster.mode == ""
	if kernelLocks && !c.loseOnUnlock {
		return failf(exitUsage, "locks=kernel: the kernel does not tell safefs when a script unlocks, so a script that unlocks before it closes loses updates; add -o lose_updates_on_unlock to mount anyway, or use locks=daemon")
	}
	c.fs.KernelLocks = kernelLocks
	if c.fs.VersionCache && (c.cluster.mode != "" || kernelLocks) {
		if c.given.cache {
			return failf(exitUsage, "cache=version cannot serve cluster mode or locks=kernel: use cache=direct")
		}
		c.fs.VersionCache = false
	}
	if !c.fs.VersionCache && !c.given.passthrough {
		c.fs.Passthrough = false
	}
	if c.fs.PassthroughWrite && !c.fs.VersionCache {
		return failf(exitUsage, "passthrough=write needs cache=version (not in cluster mode nor with locks=kernel)")
	}
	return nil
}

func passthroughName(on, write bool) string {
	switch {
	case on && write:
		return "write"
	case on:
		return "read"
	}
	return "off"
}

// setCache parses cache=direct|version.
func setCache(c *mountConfig, v string) error {
	switch v {
	case "direct", "version":
		c.fs.VersionCache = v == "version"
		c.given.cache = true
		return nil
	}
	return fmt.Errorf("cache=%q: want direct or version", v)
}

func cacheName(version bool) string {
	if version {
		return "version"
	}
	return "direct"
}

func setLocks(c *mountConfig, v string) error {
	switch v {
	case "kernel", "daemon":
		c.kernelLocks = v == "kernel"
		return nil
	}
	return fmt.Errorf("locks=%q: want kernel or daemon", v)
}

func locksName(c mountConfig) string {
	if !c.fs.KernelLocks {
		return "daemon"
	}
	return "kernel"
}

// setPassthrough parses passthrough=off|read|write.
func setPassthrough(c *mountConfig, v string) error {
	switch v {
	case "off":
		c.fs.Passthrough, c.fs.PassthroughWrite = false, false
	case "read":
		c.fs.Passthrough, c.fs.PassthroughWrite = true, false
	case "write":
		c.fs.Passthrough, c.fs.PassthroughWrite = true, true
	default:
		return fmt.Errorf("passthrough=%q: want off, read or write", v)
	}
	c.given.passthrough = true
	return nil
}
