package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMountArgs(t *testing.T) {
	def := defaultMountConfig()
	tests := []struct {
		name string
		args string
		want func(c *mountConfig)
	}{
		{"defaults", "b m", func(*mountConfig) {}},
		{"options first", "-o ro,lock_timeout=2s b m", func(c *mountConfig) {
			c.fs.ReadOnly, c.fs.LockTimeout = true, 2*time.Second
		}},
		{"options after args", "b m -o ro", func(c *mountConfig) { c.fs.ReadOnly = true }},
		{"options between args", "b -o allow_other m", func(c *mountConfig) { c.fs.AllowOther = true }},
		{"-o glued", "-oallow_other b m", func(c *mountConfig) { c.fs.AllowOther = true }},
		{"later wins", "-o ro -o rw b m", func(*mountConfig) {}},
		{"default_permissions is a no-op", "-o default_permissions b m", func(*mountConfig) {}},
		{"empty items ignored", "-o ,ro,, b m", func(c *mountConfig) { c.fs.ReadOnly = true }},
		{"everything", "-o durability=none,kill_check=off,max_waiters=3,debug,log_format=json,log_level=warn b m",
			func(c *mountConfig) {
				c.fs.Durable, c.fs.KillCheck, c.fs.MaxWaiters, c.fs.Debug = false, false, 3, true
				c.logFormat, c.logLevel = "json", "warn"
			}},
		{"dash-dash", "-o ro -- -b m", func(c *mountConfig) { c.fs.ReadOnly = true }},
		{"limits", "-o max_files_per_user=100,rejected_max=2G,rejected_user_max=512K b m", func(c *mountConfig) {
			c.fs.MaxFilesPerUser, c.fs.RejectedMax, c.fs.RejectedUserMax = 100, 2<<30, 512<<10
		}},
		{"size without unit", "-o rejected_max=4096 b m", func(c *mountConfig) { c.fs.RejectedMax = 4096 }},
		{"rmw auto", "-o rmw=auto,rmw_hold=2s,rmw_wait=500ms b m", func(c *mountConfig) {
			c.fs.RMWAuto, c.fs.RMWGlobs, c.fs.RMWHold, c.fs.RMWWait = true, nil, 2*time.Second, 500*time.Millisecond
		}},
		{"rmw globs", "-o rmw=*.cnt:data/count.txt b m", func(c *mountConfig) {
			c.fs.RMWAuto, c.fs.RMWGlobs = false, []string{"*.cnt", "data/count.txt"}
		}},
		{"rmw auto and a glob", "-o rmw=auto:*.cnt b m", func(c *mountConfig) {
			c.fs.RMWAuto, c.fs.RMWGlobs = true, []string{"*.cnt"}
		}},
		{"rmw off", "-o rmw=auto:x,rmw=off b m", func(c *mountConfig) { c.fs.RMWAuto, c.fs.RMWGlobs = false, nil }},
		{"passthrough read", "-o passthrough=read b m", func(c *mountConfig) { c.given.passthrough = true }},
		{"passthrough write", "-o passthrough=write b m", func(c *mountConfig) {
			c.given.passthrough, c.fs.PassthroughWrite = true, true
		}},
		{"passthrough write then read", "-o passthrough=write,passthrough=read b m", func(c *mountConfig) { c.given.passthrough = true }},
		{"passthrough off", "-o passthrough=read,passthrough=off b m", func(c *mountConfig) {
			c.fs.Passthrough, c.given.passthrough = false, true
		}},
		{"locks daemon is the default", "-o locks=daemon b m", func(c *mountConfig) {}},
		{"locks kernel means cache direct", "-o locks=daemon,locks=kernel,lose_updates_on_unlock b m", func(c *mountConfig) {
			c.kernelLocks, c.loseOnUnlock, c.fs.KernelLocks, c.fs.VersionCache, c.fs.Passthrough = true, true, true, false, false
		}},
		{"cache version", "-o cache=version b m", func(c *mountConfig) { c.given.cache = true }},
		{"cache direct", "-o cache=direct b m", func(c *mountConfig) {
			c.given.cache, c.fs.VersionCache, c.fs.Passthrough = true, false, false
		}},
		{"cache direct passthrough read", "-o passthrough=read,cache=direct b m", func(c *mountConfig) {
			c.given.cache, c.given.passthrough, c.fs.VersionCache = true, true, false
		}},
		{"cluster means cache direct", "-o cluster=etcd,etcd=http://127.0.0.1:1 b m", func(c *mountConfig) {
			c.cluster.mode, c.cluster.endpoints = "etcd", []string{"http://127.0.0.1:1"}
			c.fs.VersionCache, c.fs.Passthrough = false, false
		}},
		{"cache version locks daemon", "-o cache=version,locks=daemon b m", func(c *mountConfig) { c.given.cache = true }},
		{"append_publish", "-o append_publish=250ms b m", func(c *mountConfig) { c.fs.AppendPublish = 250 * time.Millisecond }},
		{"append_publish off", "-o append_publish=off b m", func(c *mountConfig) { c.fs.AppendPublish = 0 }},
		{"append_publish 0", "-o append_publish=0 b m", func(c *mountConfig) { c.fs.AppendPublish = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseMountArgs(strings.Fields(tt.args))
			require.NoError(t, err)
			want := def
			tt.want(&want)
			assert.Equal(t, want, a.cfg)
			assert.Equal(t, "m", a.mountpoint)
		})
	}
}

func TestParseMountArgsErrors(t *testing.T) {
	for _, args := range []string{
		"", "b", "b m x", "-o", "-o nope b m", "-o lock_timeout=-1s b m",
		"-o max_waiters=two b m", "-o durability b m", "-o debug=1 b m", "--bogus b m",
		"-o max_files_per_user=-1 b m", "-o rejected_max=0 b m", "-o rejected_max=1T b m",
		"-o rejected_user_max=M b m", "-o rejected_max=99999999999G b m",
		"-o rmw b m", "-o rmw= b m", "-o rmw=[x b m", "-o rmw=a:: b m", "-o rmw_hold=0 b m", "-o rmw_wait=soon b m",
		"-o passthrough b m", "-o passthrough=on b m", "-o locks b m", "-o locks=etcd b m",
		"-o cache b m", "-o cache=page b m",
		"-o cache=version,cluster=etcd,etcd=http://127.0.0.1:1 b m",
		"-o cache=version,locks=kernel b m", "-o locks=kernel,cache=version b m",
		"-o locks=kernel b m", "-o cache=version,locks=kernel,lose_updates_on_unlock b m",
		"-o passthrough=write,cache=direct b m", "-o passthrough=write,locks=kernel,lose_updates_on_unlock b m",
		"-o passthrough=write,cluster=etcd,etcd=http://127.0.0.1:1 b m",
		"-o append_publish b m", "-o append_publish=-1s b m", "-o append_publish=2h b m", "-o append_publish=soon b m",
	} {
		t.Run(args, func(t *testing.T) {
			_, err := parseMountArgs(strings.Fields(args))
			assert.Equal(t, exitUsage, exitCode(err), "%v", err)
		})
	}
}

func TestDefaultsMatchFS(t *testing.T) {
	c := defaultMountConfig()
	assert.Equal(t, 10*time.Second, c.fs.LockTimeout)
	assert.Equal(t, 256, c.fs.MaxWaiters)
	assert.True(t, c.fs.Durable)
	assert.True(t, c.fs.KillCheck)
	assert.Equal(t, time.Second, c.fs.AppendPublish)
	assert.False(t, c.fs.ReadOnly)
	assert.True(t, c.fs.VersionCache)
	assert.True(t, c.fs.Passthrough)
	assert.False(t, c.fs.PassthroughWrite)
	assert.Equal(t, "daemon", locksName(c))
	assert.Equal(t, "console", c.logFormat)
	assert.Equal(t, "info", c.logLevel)
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger("json", "warn", &buf)
	require.NoError(t, err)
	log.Info("dropped")
	log.Warn("kept")
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	assert.Equal(t, "kept", line["msg"])

	_, err = newLogger("xml", "info", &buf)
	assert.Error(t, err)
	_, err = newLogger("console", "fatal", &buf)
	assert.Error(t, err)
}

func TestExitCodeOfUnclassifiedError(t *testing.T) {
	assert.Equal(t, exitInternal, exitCode(assert.AnError))
	assert.Equal(t, exitOK, exitCode(nil))
}
