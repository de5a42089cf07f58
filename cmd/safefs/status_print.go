package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/rmw"
)

// printStatus writes the human-readable form of a status. Paths and
// command lines are www-data's to choose: each goes through shown.
func printStatus(out io.Writer, st *fs.Status) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if st.Node != "" {
		fmt.Fprintf(w, "cluster node %s, mounted at %s\n", shown(st.Node), shown(st.Mountpoint))
	}
	fmt.Fprintf(w, "commit locks held: %d\n", len(st.Locks))
	for _, l := range st.Locks {
		fmt.Fprintf(w, "  %s\n", shown(l.Path))
		fmt.Fprintf(w, "    holder\t%s\theld %.1fs\t%s\n", who(l.Holder), l.Holder.For, shown(l.Holder.Cmdline))
		for i, p := range l.Waiters {
			fmt.Fprintf(w, "    waiter %d\t%s\twaiting %.1fs\t%s\n", i+1, who(p), p.For, shown(p.Cmdline))
		}
	}
	if len(st.Sessions) > 0 {
		fmt.Fprintf(w, "rmw sessions held: %d\n", len(st.Sessions))
	}
	for _, s := range st.Sessions {
		fmt.Fprintf(w, "  %s\n", s.Path)
		fmt.Fprintf(w, "    holder\t%s\theld %.1fs\t%s\n", who(s.Holder), s.Holder.For, s.Holder.Cmdline)
		for i, p := range s.Waiters {
			fmt.Fprintf(w, "    waiter %d\t%s\twaiting %.1fs\t%s\n", i+1, who(p), p.For, p.Cmdline)
		}
	}
	if len(st.Classes) > 0 {
		fmt.Fprintf(w, "rmw request classes: %d\n", len(st.Classes))
	}
	for _, c := range st.Classes {
		class := c.Class
		if class == "" {
			class = "(any)"
		}
		state := c.State
		if state == "learning" {
			state = fmt.Sprintf("learning (%d of %d read-only)", c.Reads, rmw.ReadOnlyAfter)
		}
		fmt.Fprintf(w, "  %s\tuid %d\t%s\t%s\t%s\n", c.Path, c.UID, class, state, c.Program)
	}
	fmt.Fprintf(w, "open writers: %d\n", len(st.Writers))
	for _, wr := range st.Writers {
		fmt.Fprintf(w, "  %s\tpid %d uid %d\tpending %d bytes\t%s\n", shown(wr.Path), wr.PID, wr.UID, wr.PendingBytes, shown(wr.Cmdline))
	}
	fmt.Fprintf(w, "rejected/: %d files\n", len(st.Rejected))
	for _, k := range st.Rejected {
		fmt.Fprintf(w, "  %s\t%d bytes\n", shown(k.Name), k.Bytes)
	}
	c := st.Counters
	fmt.Fprintf(w, "counters: commits %d, rejected %d, killed %d, dropped %d, too_many_files %d, no_space %d\n",
		c.Commits, c.Rejected, c.Killed, c.Dropped, c.TooManyFiles, c.NoSpace)
	fmt.Fprintf(w, "  rmw: sessions %d, waits %d (%.1fs in all), cycles %d, gave_up %d\n", c.RMWSessions, c.RMWWaits,
		time.Duration(c.RMWWaitNanos).Seconds(), c.RMWCycles, c.RMWGaveUp)
	fmt.Fprintf(w, "  passthrough: opens %d, maps only %d, writers %d (commits of a copy %d)\n", c.Passthrough, c.PassthroughDirect, c.PassthroughWrite, c.PassthroughCopied)
	_ = w.Flush()
}

// shown is s as the terminal may get it: as it is when every character
// is printable and none is a quote or backslash, else Go-quoted
// ("a\nb", "\x1b[2J"), so that a name cannot end a line, forge one, move
// the cursor or pass for a quoted one.
func shown(s string) string {
	if utf8.ValidString(s) && !strings.ContainsAny(s, `"\`) &&
		strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func who(p fs.Party) string {
	if p.PID == 0 {
		return "(rename or unlink)"
	}
	if p.TID != 0 {
		return fmt.Sprintf("pid %d tid %d uid %d", p.PID, p.TID, p.UID)
	}
	return fmt.Sprintf("pid %d uid %d", p.PID, p.UID)
}
