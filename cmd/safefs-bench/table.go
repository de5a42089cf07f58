package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// result is one workload's figure on one target.
type result struct {
	value float64 // units per second, or a count for rows with a total
	err   error
	ran   bool
	// calls: the system calls of -syscalls' counted run of its commits
	// (callsErr if it failed).
	calls    counts
	commits  float64
	callsErr error
	// ops: the FUSE requests of -fusetrace's run of its commits.
	ops        fuseOps
	opsCommits float64
	opsErr     error
	extra      string // the cell of the workload's extra row
}

// writeTable prints one row per workload and one column per target, each
// cell "figure unit (r1x, r2x)" with the ratios to the backing directory's
// and the loopback's figures, or "count/total" for rows that are not rates.
func writeTable(w io.Writer, ws []workload, targets []string, res map[string]map[string]result, cfg config, markdown bool) {
	grid := [][]string{append([]string{"workload"}, targets...)}
	for _, wl := range ws {
		row := []string{wl.name}
		if wl.title != nil {
			row[0] = wl.title(cfg)
		}
		for _, t := range targets {
			row = append(row, cell(wl, res[wl.name], t, cfg))
		}
		grid = append(grid, row)
		if wl.extra != nil {
			grid = append(grid, extraRow(wl, res[wl.name], targets, cfg))
		}
	}
	if markdown {
		writeMarkdown(w, grid)
	} else {
		writePlain(w, grid)
	}
}

// cell formats target t's result in one workload's results rs.
func cell(wl workload, rs map[string]result, t string, cfg config) string {
	r := rs[t]
	switch {
	case !r.ran:
		return "-"
	case r.err != nil:
		return errCell(r.err)
	case wl.total != nil:
		return fmt.Sprintf("%.0f/%.0f", r.value, wl.total(cfg))
	case wl.text:
		return r.extra
	}
	var ratios []string
	for _, b := range []string{"backing", "loopback"} {
		if base, ok := rs[b]; ok && base.ran && base.err == nil && base.value > 0 {
			ratios = append(ratios, ratio(r.value/base.value)+"x")
		} else {
			ratios = append(ratios, "?")
		}
	}
	// The durable anchor, in the rows it runs.
	if base, ok := rs[byHandTarget]; ok && base.ran && base.err == nil && base.value > 0 {
		ratios = append(ratios, "by hand "+ratio(r.value/base.value)+"x")
	}
	if base, ok := rs[wl.anchor]; ok && wl.anchor != t && base.ran && base.err == nil && base.value > 0 {
		ratios = append(ratios, wl.anchor+" "+ratio(r.value/base.value)+"x")
	}
	return figure(r.value) + " " + wl.unit + " (" + strings.Join(ratios, ", ") + ")"
}

// extraRow is the second row of a workload that has one: the cells its
// run made, or the first row's error.
func extraRow(wl workload, rs map[string]result, targets []string, cfg config) []string {
	row := []string{wl.extra(cfg)}
	for _, t := range targets {
		switch r := rs[t]; {
		case !r.ran:
			row = append(row, "-")
		case r.err != nil:
			row = append(row, errCell(r.err))
		default:
			row = append(row, r.extra)
		}
	}
	return row
}

// errCell names the errno when there is one ("error: ENODEV"): the full
// error goes to stderr.
func errCell(err error) string {
	for _, tool := range []error{errNoApache, errNoJava} {
		if errors.Is(err, tool) {
			return "error: " + tool.Error()
		}
	}
	if errors.Is(err, errTorn) {
		return "torn"
	}
	var lost lostError
	if errors.As(err, &lost) {
		return "error: " + lost.Error()
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return "error: " + name
		}
	}
	return "error"
}

// figure prints about three significant digits.
func figure(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// ratio keeps two significant digits below 0.1 (0.0047, not 0.00).
func ratio(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// writePlain aligns the first column left and the others right.
func writePlain(w io.Writer, grid [][]string) {
	width := make([]int, len(grid[0]))
	for _, row := range grid {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	for _, row := range grid {
		cells := make([]string, len(row))
		for i, c := range row {
			if i == 0 {
				cells[i] = fmt.Sprintf("%-*s", width[i], c)
			} else {
				cells[i] = fmt.Sprintf("%*s", width[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(strings.Join(cells, "  "), " "))
	}
}

func writeMarkdown(w io.Writer, grid [][]string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(grid[0], " | "))
	sep := []string{"---"}
	for range grid[0][1:] {
		sep = append(sep, "---:")
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, row := range grid[1:] {
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

// writeCommitTable prints a table of the commit rows on targets ts, each
// cell and its detail line (if any) from cell, then legend and the
// details, one per line.
func writeCommitTable(w io.Writer, title string, ws []workload, ts []*target, markdown bool, legend string,
	cell func(workload, *target) (string, string)) {
	head := []string{title}
	for _, t := range ts {
		head = append(head, t.name)
	}
	grid := [][]string{head}
	var detail []string
	for _, wl := range ws {
		if !wl.commits {
			continue
		}
		row := []string{wl.name}
		for _, t := range ts {
			c, d := cell(wl, t)
			row = append(row, c)
			if d != "" {
				detail = append(detail, fmt.Sprintf("%s on %s: %s", wl.name, t.name, d))
			}
		}
		grid = append(grid, row)
	}
	fmt.Fprintln(w)
	if markdown {
		writeMarkdown(w, grid)
	} else {
		writePlain(w, grid)
	}
	fmt.Fprintln(w, legend)
	for _, d := range detail {
		if markdown {
			d = "- " + d
		}
		fmt.Fprintln(w, d)
	}
}
