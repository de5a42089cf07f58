package main

import (
	"fmt"
	"io"
	"strings"
)

// result is one workload's figure on one target.
type result struct {
	value float64 // units per second
	err   error
	ran   bool
}

// writeTable prints one row per workload and one column per target, each
// cell "figure unit (ratio x)" with the ratio to the backing directory's figure.
func writeTable(w io.Writer, ws []workload, targets []string, res map[string]map[string]result, markdown bool) {
	grid := [][]string{append([]string{"workload"}, targets...)}
	for _, wl := range ws {
		row := []string{wl.name}
		base, hasBase := res[wl.name]["backing"]
		for _, t := range targets {
			r := res[wl.name][t]
			var cell string
			switch {
			case !r.ran:
				cell = "-"
			case r.err != nil:
				cell = "error"
			default:
				cell = figure(r.value) + " " + wl.unit
				if hasBase && base.ran && base.err == nil && base.value > 0 {
					cell += " (" + ratio(r.value/base.value) + "x)"
				}
			}
			row = append(row, cell)
		}
		grid = append(grid, row)
	}
	if markdown {
		writeMarkdown(w, grid)
	} else {
		writePlain(w, grid)
	}
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
