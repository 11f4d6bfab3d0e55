// Package htmlreport writes replay, sweep and fragcheck reports as
// self-contained HTML files: styles, script and charts inline, nothing
// fetched from the network, and the same bytes for the same input.
//
// The charts are hand-written SVG rather than a chart library: a library
// such as go-echarts would inline about 1 MB of JavaScript and draw the
// charts only once that script has run, while SVG drawn here is a few
// hundred kilobytes at most, shows without JavaScript, and carries its
// figures as data-* attributes that a test (or a browser check) can read
// straight from the DOM. A small inline script adds hover read-outs and
// zooming (drag across a timeline; double-click to reset).
//
// The replay report ([Write]) shows:
//   - a timeline of allocated, active and reserved memory, with the cap
//     (when there is one), the peak and the out-of-memory marked;
//   - fragmentation (1 − allocated/reserved) over the same operations;
//   - segment maps at the peak and at the out-of-memory: each segment a
//     bar, its blocks coloured by state, the largest free block outlined;
//   - the top allocation sites by bytes live at the peak, when the trace
//     recorded stacks;
//   - for a workload, where each of its phases starts, on the timeline and
//     in the hover read-out.
//
// [WriteSweep] draws a sweep: a bar of peak reserved memory per setting,
// in the table's order, the lower bound (peak live bytes) and the cards as
// vertical lines, a fits/OOM mark per card and the recommendation.
// [WriteFragcheck] shows each fragcheck case against its limits: its
// status, its fragmentation on a bar marked at the warning level and the
// limit, and its peak reserved memory against max_reserved and must_fit.
// Their figures, too, are data-* attributes; hover read-outs are SVG
// titles, so these two pages run no script.
//
// [WriteDiff] overlays two runs' reserved and allocated memory on one
// axis, the second run's operations stretched so that the annotations both
// recorded line up (figures.Align), above the diff's table and sites; it
// shares the timeline's chart and zoom script (chart.html.tmpl, chart.js).
//
// Timelines longer than [MaxPoints] are thinned by [Downsample], which
// keeps each stretch's extremes, so a report of a trace of millions of
// events stays small and opens at once.
package htmlreport
