package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// row is one line of the results table. Cells are pre-formatted.
type row struct {
	workload         string
	ours, ref, deb   string
	ratioDeb, ratioB string // ours/Debian, ours/fastest reference
	target, verdict  string
}

type table struct {
	rows  []row
	notes []string
}

func (t *table) add(r row) { t.rows = append(t.rows, r) }

func (t *table) note(format string, a ...any) { t.notes = append(t.notes, fmt.Sprintf(format, a...)) }

// write prints the table as Markdown (readable on a terminal too).
func (t *table) write(w io.Writer, header []string) {
	for _, h := range header {
		fmt.Fprintln(w, h)
	}
	fmt.Fprintln(w)
	if len(t.rows) == 0 {
		return // only the node workload ran (-only node)
	}
	cols := []string{"workload", "ours", "ref v1.9.1", "Debian 1.1.1", "ours/Debian", "ours/fastest ref", "target", "result"}
	var cells [][]string
	for _, r := range t.rows {
		cells = append(cells, []string{r.workload, r.ours, r.ref, r.deb, r.ratioDeb, r.ratioB, r.target, r.verdict})
	}
	writeMarkdown(w, cols, cells, t.notes)
}

// writeMarkdown prints an aligned Markdown table and its notes.
func writeMarkdown(w io.Writer, cols []string, rows [][]string, notes []string) {
	cells := append([][]string{cols}, rows...)
	width := make([]int, len(cols))
	for _, c := range cells {
		for i, s := range c {
			width[i] = max(width[i], len([]rune(s)))
		}
	}
	line := func(c []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, s := range c {
			b.WriteString(" " + s + strings.Repeat(" ", width[i]-len([]rune(s))) + " |")
		}
		fmt.Fprintln(w, b.String())
	}
	line(cells[0])
	sep := make([]string, len(cols))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, c := range cells[1:] {
		line(c)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Notes:")
		for _, n := range notes {
			fmt.Fprintln(w, "- "+n)
		}
	}
}

// cell is one measured value of a subject: its median, or why it is missing.
type cell struct {
	v     float64 // the median in the row's unit (ms, bytes, count), 0 if none
	text  string
	fails int
}

// timeCell summarizes a subject's samples (adds or dels).
func timeCell(s *subject, samples []time.Duration) cell {
	if s == nil {
		return cell{text: "-"}
	}
	if s.unavailable != "" {
		return cell{text: "n/a"}
	}
	m, ok := median(samples)
	if !ok {
		return cell{text: fmt.Sprintf("failed ×%d", s.fails), fails: s.fails}
	}
	c := cell{v: float64(m) / float64(time.Millisecond), text: ms(m), fails: s.fails}
	if s.fails > 0 {
		c.text += fmt.Sprintf(" (%d failed)", s.fails)
	}
	return c
}

// target is an upper bound on a ratio; zero means none.
type target struct {
	max  float64
	text string // how the bound is shown, e.g. "≤ 0.35× fastest ref"
}

// compareRow builds a row of three cells with ratios of ours against
// Debian and against the fastest reference, and a verdict when a target
// applies: PASS needs ours measured without failures.
func compareRow(name string, ours, ref, deb cell, tg target) row {
	r := row{workload: name, ours: ours.text, ref: ref.text, deb: deb.text,
		ratioDeb: ratio(ours.v, deb.v), ratioB: "-", target: "-", verdict: "-"}
	best := 0.0
	for _, c := range []cell{ref, deb} {
		if c.v > 0 && (best == 0 || c.v < best) {
			best = c.v
		}
	}
	r.ratioB = ratio(ours.v, best)
	if tg.max > 0 {
		r.target = tg.text
		r.verdict = verdict(ours.v > 0 && best > 0 && ours.fails == 0 && ours.v/best <= tg.max, ours.v > 0 && best > 0)
	}
	return r
}

// verdict is PASS, MISS, or "no data" when the inputs were not measured.
func verdict(pass, measured bool) string {
	switch {
	case !measured:
		return "no data"
	case pass:
		return "PASS"
	default:
		return "MISS"
	}
}
