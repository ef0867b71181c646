package rdzvbench

import (
	"fmt"
	"math"
	"strings"
)

// Plot draws one run's results as a picture (SVG): the time of a round
// and of its floor against the number of agents (a log scale of agents,
// seconds from 0), with the ratio at each point. Counts that were not run
// are left out; note says what the run was (its date, the machine).
func Plot(results []Result, note string) []byte {
	var pts []Result
	for _, r := range results {
		if r.Skipped == "" && r.Failed == "" && r.Agents > 0 {
			pts = append(pts, r)
		}
	}
	const w, h, left, right, top, bottom = 640.0, 400.0, 70.0, 20.0, 40.0, 60.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%g" y="20" font-size="14">Rendezvous of N agents against the etcd floor, same run</text>`+"\n", left)
	if len(pts) == 0 {
		fmt.Fprintf(&b, `<text x="%g" y="%g">no count was run</text>`+"\n</svg>\n", left, h/2)
		return []byte(b.String())
	}
	maxY := 0.0
	minX, maxX := math.Log2(float64(pts[0].Agents)), math.Log2(float64(pts[0].Agents))
	for _, p := range pts {
		maxY = max(maxY, p.Seconds, p.FloorSeconds)
		x := math.Log2(float64(p.Agents))
		minX, maxX = min(minX, x), max(maxX, x)
	}
	step := niceStep(maxY / 5)
	maxY = math.Ceil(maxY/step) * step
	// A margin on either side, so that no point sits on an edge.
	minX, maxX = minX-0.3, maxX+0.3
	px := func(agents int) float64 {
		return left + (math.Log2(float64(agents))-minX)/(maxX-minX)*(w-left-right)
	}
	py := func(s float64) float64 { return h - bottom - s/maxY*(h-top-bottom) }
	// Axes, ticks and labels.
	fmt.Fprintf(&b, `<path d="M%g %gV%gH%g" stroke="black" fill="none"/>`+"\n", left, top, h-bottom, w-right)
	for y := 0.0; y <= maxY+step/2; y += step {
		fmt.Fprintf(&b, `<path d="M%g %.1fH%g" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%s s</text>`+"\n",
			left, py(y), w-right, left-6, py(y)+4, trimFloat(y))
	}
	for _, p := range pts {
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%d</text>`+"\n", px(p.Agents), h-bottom+18, p.Agents)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">agents (log scale)</text>`+"\n", left+(w-left-right)/2, h-bottom+38)
	// The two curves, and the ratio over each point.
	for _, c := range []struct {
		name, color string
		at          func(Result) float64
	}{
		{"rendezvous", "#c0392b", func(r Result) float64 { return r.Seconds }},
		{"floor (lease, put, watch event)", "#2471a3", func(r Result) float64 { return r.FloorSeconds }},
	} {
		var path []string
		for i, p := range pts {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			path = append(path, fmt.Sprintf("%s%.1f %.1f", cmd, px(p.Agents), py(c.at(p))))
		}
		fmt.Fprintf(&b, `<path d="%s" stroke="%s" stroke-width="2" fill="none"/>`+"\n", strings.Join(path, ""), c.color)
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p.Agents), py(c.at(p)), c.color)
		}
	}
	for _, p := range pts {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#c0392b">%.2fx</text>`+"\n", px(p.Agents), py(p.Seconds)-8, p.Seconds/p.FloorSeconds)
	}
	// Legend and note.
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="12" height="3" fill="#c0392b"/><text x="%g" y="%g">rendezvous (ratio to the floor above)</text>`+"\n", left+10, top+6, left+28, top+10)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="12" height="3" fill="#2471a3"/><text x="%g" y="%g">floor: each client a lease, a put and a watch event</text>`+"\n", left+10, top+22, left+28, top+26)
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" fill="#555">%s</text>`+"\n", left, h-8, escapeXML(note))
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// trimFloat prints an axis value without trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// escapeXML escapes text for an SVG text element.
func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
