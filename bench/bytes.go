package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ourPluginSet lists the plugin types our multi-call binary is installed as
// in dir (every entry that is the same file as dir/loopback) and that file's
// size, counted once.
func ourPluginSet(dir string) ([]string, int64, error) {
	lo, err := os.Stat(filepath.Join(dir, "loopback"))
	if err != nil {
		return nil, 0, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var types []string
	for _, e := range ents {
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil || !os.SameFile(st, lo) || e.Name() == "patchbay-plugins" {
			continue
		}
		types = append(types, e.Name())
	}
	sort.Strings(types)
	return types, lo.Size(), nil
}

// sumSizes adds the sizes of the named executables in dir; missing lists
// the names not there.
func sumSizes(dir string, types []string) (total int64, missing []string) {
	for _, t := range types {
		st, err := os.Stat(filepath.Join(dir, t))
		if err != nil {
			missing = append(missing, t)
			continue
		}
		total += st.Size()
	}
	return total, missing
}

// bytesWorkload compares plugin bytes on disk for the plugin set our binary
// holds.
func (e *env) bytesWorkload() {
	types, ours, err := ourPluginSet(e.impls[0].dir)
	if err != nil {
		e.tbl.note("plugin bytes: not measured: %v", err)
		return
	}
	cells := []cell{{v: float64(ours), text: bytesMB(ours)}}
	for _, im := range e.impls[1:] {
		total, missing := sumSizes(im.dir, types)
		c := cell{v: float64(total), text: bytesMB(total)}
		if len(missing) > 0 {
			c.text += fmt.Sprintf(" (lacks %s)", strings.Join(missing, ","))
			e.tbl.note("plugin bytes: %s lacks %s; its sum covers the rest", im.label, strings.Join(missing, ", "))
		}
		cells = append(cells, c)
	}
	e.tbl.add(compareRow(fmt.Sprintf("plugin bytes on disk (%d types)", len(types)), cells[0], cells[1], cells[2], target{}))
	e.tbl.note("plugin bytes: set %s; ours is one multi-call binary counted once (built -s -w), the references are one binary per type (v1.9.1 from go install, symbols kept; Debian's stripped)", strings.Join(types, ", "))
}
