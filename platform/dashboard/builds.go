package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// buildStatuses are the ?status= values of the feature builds page.
var buildStatuses = []string{"pending", "running", "completed", "failed", "cancelled"}

// buildsPage lists feature builds, newest first, filtered by ?feature= and ?status=.
func (d *Dashboard) buildsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &schedulerv1.ListFeatureBuildsRequest{PageSize: 100, Feature: q.Get("feature"), PageToken: q.Get("page")}
	if s := q.Get("status"); s != "" {
		v, ok := schedulerv1.FeatureBuildStatus_value["FEATURE_BUILD_STATUS_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			w.WriteHeader(http.StatusBadRequest)
			d.render(w, r, "error", map[string]any{"Code": "InvalidArgument", "Message": "status " + s + ": want " + strings.Join(buildStatuses, ", ")})
			return
		}
		req.Statuses = []schedulerv1.FeatureBuildStatus{schedulerv1.FeatureBuildStatus(v)}
	}
	res, err := d.sched.ListFeatureBuilds(d.readCtx(r), req)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.render(w, r, "builds", map[string]any{"Title": "Feature builds", "Builds": res.GetFeatureBuilds(), "Next": res.GetNextPageToken(),
		"Status": q.Get("status"), "Feature": q.Get("feature"), "Statuses": buildStatuses})
}

// chartBar is one iteration's bar of the criteria-progress chart.
type chartBar struct {
	Number      int32
	Percent     int32
	X, Y, H     int
	Regressed   bool
	Description string
}

// chart lays the iterations' progress out as bars of an SVG 0..100 chart (drawn by the template
// with attributes only: the Content-Security-Policy allows no inline style).
func chart(its []*schedulerv1.FeatureIteration) (bars []chartBar, width int) {
	const barW, gap, top = 28, 16, 14 // top: room for the percent above a full bar
	for i, it := range its {
		p := max(0, min(100, it.GetProgressPercent()))
		b := chartBar{Number: it.GetNumber(), Percent: p, X: gap + i*(barW+gap), H: int(p), Y: top + 100 - int(p),
			Regressed: len(it.GetRegressedCriteria()) > 0}
		b.Description = fmt.Sprintf("iteration %d: %d%% of the automatic criteria passing", it.GetNumber(), p)
		if b.Regressed {
			b.Description += fmt.Sprintf(", %d regressed", len(it.GetRegressedCriteria()))
		}
		bars = append(bars, b)
	}
	return bars, gap + len(its)*(barW+gap)
}

// buildPage is one feature build: its state and exit report, the iterations with their verdicts,
// criteria progress over the iterations (a small chart), regressions and the recovery log.
func (d *Dashboard) buildPage(w http.ResponseWriter, r *http.Request) {
	res, err := d.sched.GetFeatureBuild(d.readCtx(r), &schedulerv1.GetFeatureBuildRequest{
		Key: &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: r.PathValue("id")}})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	fb := res.GetFeatureBuild()
	bars, width := chart(fb.GetIterations())
	d.render(w, r, "build", map[string]any{"Title": "Feature build " + fb.GetId(), "Build": fb, "Bars": bars, "ChartWidth": width})
}

// buildAction is POST /builds/{id}/cancel (CancelFeatureBuild with the operator's token).
func (d *Dashboard) buildAction(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if r.PathValue("action") != "cancel" {
		http.NotFound(w, r)
		return
	}
	_, err := d.sched.CancelFeatureBuild(d.actCtx(r), &schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: id, Reason: reasonOf(r)})
	d.done(w, r, err, "/builds/"+url.PathEscape(id))
}
