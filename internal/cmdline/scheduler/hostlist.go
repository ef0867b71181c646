package scheduler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds a host list's expansion, so that a typo such as
// node[0-99999999] is an error, not a few gigabytes of names.
const MaxHosts = 1 << 16

// ErrHostlist: a host list is not in Slurm's syntax.
var ErrHostlist = errors.New("bad host list")

// ExpandHostlist expands a host list in Slurm's compressed syntax, as
// `scontrol show hostnames` does, without calling it: names separated by
// commas, each with any number of bracket groups of numbers and ranges
// (gpu-[001-004,010],login1; rack[1-2]-node[01-02]). A range keeps the
// width of its first number (001-010 gives 001 ... 010). Names come out in
// the order written, each group's numbers in order.
func ExpandHostlist(list string) ([]string, error) {
	list = strings.TrimSpace(list)
	if list == "" {
		return nil, fmt.Errorf("%w: empty", ErrHostlist)
	}
	var hosts []string
	for _, item := range splitTop(list) {
		if item == "" {
			return nil, fmt.Errorf("%w: %q: an empty name between commas", ErrHostlist, list)
		}
		names, err := expandItem(item, MaxHosts-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrHostlist, list, err)
		}
		hosts = append(hosts, names...)
	}
	return hosts, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// expandItem expands one name with its bracket groups, at most limit
// names.
func expandItem(item string, limit int) ([]string, error) {
	names := []string{""}
	for rest := item; rest != ""; {
		open := strings.IndexAny(rest, "[]")
		if open < 0 {
			names = appendEach(names, rest)
			break
		}
		if rest[open] == ']' {
			return nil, fmt.Errorf("%q: ']' without '['", item)
		}
		end := strings.IndexAny(rest[open+1:], "[]")
		if end < 0 || rest[open+1+end] != ']' {
			return nil, fmt.Errorf("%q: '[' without its ']' (brackets do not nest)", item)
		}
		names = appendEach(names, rest[:open])
		numbers, err := expandGroup(rest[open+1:open+1+end], limit)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", item, err)
		}
		if len(names)*len(numbers) > limit {
			return nil, fmt.Errorf("%q: more than %d hosts", item, MaxHosts)
		}
		product := make([]string, 0, len(names)*len(numbers))
		for _, n := range names {
			for _, num := range numbers {
				product = append(product, n+num)
			}
		}
		names = product
		rest = rest[open+1+end+1:]
	}
	if len(names) == 1 && names[0] == "" {
		return nil, fmt.Errorf("%q: no name", item)
	}
	return names, nil
}

func appendEach(names []string, s string) []string {
	for i := range names {
		names[i] += s
	}
	return names
}

// expandGroup expands the inside of one bracket group: numbers and
// ranges separated by commas.
func expandGroup(group string, limit int) ([]string, error) {
	if strings.TrimSpace(group) == "" {
		return nil, errors.New("empty brackets")
	}
	var out []string
	for _, part := range strings.Split(group, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		if !digits(lo) || !digits(hi) {
			return nil, fmt.Errorf("[%s]: %q is not a number or a range of numbers (such as 01-16)", group, part)
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if errA != nil || errB != nil {
			return nil, fmt.Errorf("[%s]: %q: number too large", group, part)
		}
		if b < a {
			return nil, fmt.Errorf("[%s]: range %q runs backwards", group, part)
		}
		if b-a >= limit-len(out) {
			return nil, fmt.Errorf("[%s]: more than %d hosts", group, MaxHosts)
		}
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), n))
		}
	}
	return out, nil
}

func digits(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ExpandTasksPerNode expands Slurm's tasks-per-node syntax
// (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE): counts separated by
// commas, each optionally repeated, as in 2(x3),1 for 2,2,2,1.
func ExpandTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		count, times := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, times = part[:i], part[i+2:len(part)-1]
		}
		c, err1 := strconv.Atoi(count)
		n, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || c < 0 || n < 1 || n > MaxHosts-len(out) {
			return nil, fmt.Errorf("tasks per node %q: want counts such as 2(x3),1", s)
		}
		for range n {
			out = append(out, c)
		}
	}
	return out, nil
}
