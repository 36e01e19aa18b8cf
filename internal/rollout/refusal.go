package rollout

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lullv1 "lull.dev/lull/api/v1alpha1"
)

// RefusalFresh is how recent the last FailedCreate Event of a session's
// StatefulSet must be to say that its pod is being refused now. While it
// is, lull asks the StatefulSet controller to try again at most every 5
// minutes (NextRetry's cap), and each try that fails is recorded again;
// three such periods tell a refusal that ended from one still going on.
const RefusalFresh = 15 * time.Minute

// statusLag is the longest a session's Ready condition may trail the loss
// of its pod: a replacement's passing states are written only once they
// have lasted 30 s (the session controller's ReplacingSettleDelay), and
// the StatefulSet controller's first, refused, create comes at once.
const statusLag = 30 * time.Second

// Refusal is the API server's refusal of a pod or claim the StatefulSet
// controller would create for a session, as the StatefulSet controller's
// FailedCreate Event on the session's StatefulSet quotes it.
type Refusal struct {
	// Reason is lullv1.ReasonPodQuotaExceeded (an unscoped ResourceQuota
	// without room for it refused it), lullv1.ReasonAdmissionUnavailable (the API
	// server could not call an admission webhook) or
	// lullv1.ReasonPodCreateRefused (anything else, among them a pod that
	// asks more than a quota allows in all, and a scoped quota's refusal:
	// the pod's spec puts it in the scope).
	Reason string
	// Message names the object, quotes the API server and says the fix.
	Message string
	// At is the refusal's last occurrence.
	At time.Time
	// Quota is the name of the ResourceQuota that refused it, when the
	// API server's message names one; Requested is what the refused
	// object asked of it (for example pods=1).
	Quota     string
	Requested corev1.ResourceList
}

// PodCreateRefusal returns the refusal that keeps a session without its
// pod, or nil. o.Pod must be nil and o.StatefulSet want a replica;
// events are the FailedCreate Events on that StatefulSet (its UID; any
// order), template the name of the session's SessionTemplate (for the
// fix). The latest event counts when it is fresh (RefusalFresh before
// o.Now) and newer than the last pod the StatefulSet controller did
// create for the session: not older than the session's last Ready
// transition when that condition names a pod (namesAPod), less statusLag
// when it says the session has none; unless the session already says it
// is refused. A refusal from before the pod the session had since is
// over.
func PodCreateRefusal(o Observed, events []corev1.Event, template string) *Refusal {
	sts := o.StatefulSet
	if o.Pod != nil || sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas == 0 || len(events) == 0 {
		return nil
	}
	last := &events[0]
	for i := range events {
		if EventTime(&events[i]).After(EventTime(last)) {
			last = &events[i]
		}
	}
	at := EventTime(last)
	if o.Now.Sub(at) > RefusalFresh {
		return nil
	}
	if c := meta.FindStatusCondition(o.Session.Status.Conditions, lullv1.ConditionReady); c != nil &&
		c.Reason != lullv1.ReasonPodCreateRefused && c.Reason != lullv1.ReasonPodQuotaExceeded && c.Reason != lullv1.ReasonAdmissionUnavailable {
		since := c.LastTransitionTime.Time
		if !namesAPod(c) {
			// The pod went before its status said so.
			since = since.Add(-statusLag)
		}
		if at.Before(since) {
			return nil
		}
	}
	r := &Refusal{Reason: lullv1.ReasonPodCreateRefused, At: at}
	var fix string
	switch msg := last.Message; {
	case strings.Contains(msg, "exceeded quota"):
		r.Quota, r.Requested = parseQuota(msg)
		if over := overLimit(msg); over != "" {
			// The pod alone asks more than the quota allows in all: no
			// capacity freed admits it, only a template that asks less
			// (or a larger quota). The revision's refusal, as a Pod
			// Security level's is: PodCreateRefused.
			fix = fmt.Sprintf("the pod alone asks more %s than ResourceQuota %s allows in all: lower SessionTemplate %s's requests, or raise the quota", over, cmpOr(r.Quota, "(named above)"), template)
			break
		}
		scoped, known := quotaScoped(o.Quotas, r.Quota)
		if scoped {
			// Only the pods in the quota's scope count, and the pod's
			// spec (its priority class, activeDeadlineSeconds, requests,
			// cross-namespace affinity) puts it there: a revision that
			// left the scope would be admitted. The revision's refusal:
			// PodCreateRefused.
			fix = fmt.Sprintf("ResourceQuota %s is scoped (%s) and SessionTemplate %s's pod falls in its scope: change the template so its pod leaves the scope, or raise the quota", r.Quota, scopeOf(quotaNamed(o.Quotas, r.Quota)), template)
			break
		}
		r.Reason = lullv1.ReasonPodQuotaExceeded
		fix = fmt.Sprintf("raise ResourceQuota %s of namespace %s, or free what it counts; lull asks for the pod again as soon as the quota has room", cmpOr(r.Quota, "(named above)"), sts.Namespace)
		if !known && r.Quota != "" {
			fix += fmt.Sprintf(" (ResourceQuota %s could not be read: taken as unscoped, the namespace's policy)", r.Quota)
		}
	case strings.Contains(msg, "failed calling webhook") && webhookUnreachable(msg):
		// The API server could not reach a webhook it must call: the
		// webhook's outage, which any revision's pod meets alike.
		r.Reason = lullv1.ReasonAdmissionUnavailable
		fix = "the webhook's service is not answering the API server; lull asks for the pod again on its retry schedule, and the StatefulSet controller retries too"
	case strings.Contains(msg, "failed calling webhook"):
		// The webhook was reached and answered, but its answer could not
		// be applied (an undecodable patch, a response for another
		// request, a handler's 500): it may answer so for this revision's
		// pods only, so it is the revision's refusal, PodCreateRefused.
		fix = fmt.Sprintf("the webhook answered but its answer could not be applied to SessionTemplate %s's pod: fix the webhook, or change the template so the webhook handles its pod", template)
	case strings.Contains(msg, "violates PodSecurity"):
		fix = fmt.Sprintf("make SessionTemplate %s's pod meet the namespace's Pod Security level, or change the namespace's pod-security.kubernetes.io labels", template)
	case strings.Contains(msg, "LimitRange") || strings.Contains(msg, "per Container") || strings.Contains(msg, "per Pod"):
		fix = fmt.Sprintf("fit SessionTemplate %s's resources to the namespace's LimitRange, or change the LimitRange", template)
	case strings.Contains(msg, "admission webhook"):
		fix = fmt.Sprintf("change SessionTemplate %s so the webhook admits its pod, or the webhook's policy", template)
	default:
		fix = fmt.Sprintf("fix SessionTemplate %s, or what refuses its pod", template)
	}
	r.Message = fmt.Sprintf("the StatefulSet controller cannot create the pod (or its claim) of StatefulSet %s: %s; %s", sts.Name, last.Message, fix)
	return r
}

// quotaScoped reports whether the ResourceQuota name among quotas is
// scoped (spec.scopes or spec.scopeSelector), and whether it is among
// them at all. A quota lull cannot read (gone since it refused, not
// cached, not allowed) is taken as unscoped, as a count quota is the
// namespace's policy: the brake then keeps moving sessions as it did
// before scopes were told apart, rather than stopping every template of a
// namespace on a guess; the message says the quota was not read.
func quotaScoped(quotas []corev1.ResourceQuota, name string) (scoped, known bool) {
	q := quotaNamed(quotas, name)
	if q == nil {
		return false, false
	}
	return len(q.Spec.Scopes) > 0 || (q.Spec.ScopeSelector != nil && len(q.Spec.ScopeSelector.MatchExpressions) > 0), true
}

func quotaNamed(quotas []corev1.ResourceQuota, name string) *corev1.ResourceQuota {
	if name == "" {
		return nil
	}
	for i := range quotas {
		if quotas[i].Name == name {
			return &quotas[i]
		}
	}
	return nil
}

// scopeOf describes a scoped quota's scope: its scopes and its
// scopeSelector's expressions ("PriorityClass In [high]").
func scopeOf(q *corev1.ResourceQuota) string {
	var parts []string
	for _, sc := range q.Spec.Scopes {
		parts = append(parts, string(sc))
	}
	if q.Spec.ScopeSelector != nil {
		for _, e := range q.Spec.ScopeSelector.MatchExpressions {
			p := fmt.Sprintf("%s %s", e.ScopeName, e.Operator)
			if len(e.Values) > 0 {
				p += fmt.Sprintf(" [%s]", strings.Join(e.Values, " "))
			}
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ", ")
}

// namesAPod reports whether the session's Ready condition c was written
// of a pod the session had (PodReady, PodNotReady, PodFailed). Its
// lastTransitionTime is then no earlier than that pod's creation, as
// NextStatus sets it anew for each new pod: a refusal before it was of a
// create the StatefulSet controller did make since, and is over, however
// long that pod lived without becoming Ready. The StatefulSet's status
// records no time, and the pod is gone; the condition is the session's
// own record of the last pod it saw and when.
func namesAPod(c *metav1.Condition) bool {
	switch c.Reason {
	case lullv1.ReasonPodReady, lullv1.ReasonPodNotReady, lullv1.ReasonPodFailed:
		return true
	}
	return false
}

// EventTime is when an Event last occurred: the latest of its series'
// last observation, its lastTimestamp, eventTime, firstTimestamp and
// creation.
func EventTime(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, u := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// quotaRefusal matches the ResourceQuota admission plugin's message:
// "exceeded quota: <name>, requested: <r>=<q>,..., used: ..., limited: ...".
var quotaRefusal = regexp.MustCompile(`exceeded quota: ([^,\s]+), requested: ([^\s]+), used:`)

// parseQuota returns the quota and the resources a quota refusal names;
// empty when msg is not one.
func parseQuota(msg string) (string, corev1.ResourceList) {
	m := quotaRefusal.FindStringSubmatch(msg)
	if m == nil {
		return "", nil
	}
	return m[1], parseResources(m[2])
}

// quotaLimits matches the "requested: ..., used: ..., limited: ..." part of
// the ResourceQuota admission plugin's message.
var quotaLimits = regexp.MustCompile(`requested: ([^\s]+), used: ([^\s]+), limited: ([^\s]+)`)

// overLimit returns the first resource a quota refusal's request asks more
// of than the quota's hard limit, counting only the amounts a template
// asks for (templateAmount), "" when none does (the quota is only full, or
// counts no more objects) or msg is not one.
// webhookUnreachable reports whether a "failed calling webhook" refusal
// says the API server never got an answer from the webhook: the
// connection refused, reset or timed out, no endpoint or no such host,
// a TLS handshake that failed, the webhook's service overloaded. The
// API server wraps an answer it got but could not use (an undecodable
// patch, a response whose uid is another request's, a handler's 500:
// "an error on the server") the same way (k8s.io/apiserver,
// ErrCallingWebhook); those are not an outage.
func webhookUnreachable(msg string) bool {
	for _, m := range []string{"connection refused", "connection reset", "context deadline exceeded", "i/o timeout",
		"Client.Timeout", "no endpoints available", "no such host", "no route to host", "network is unreachable",
		"x509:", "tls:", "the server is currently unable to handle the request", "service unavailable"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

func overLimit(msg string) string {
	m := quotaLimits.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	requested, limited := parseResources(m[1]), parseResources(m[3])
	for _, k := range slices.Sorted(maps.Keys(requested)) {
		if !templateAmount(k) {
			// Every revision's pod or claim counts one: a count's limit is
			// the namespace's policy (an unscoped quota of 0 pods or
			// claims closes it; a scoped one is judged by its scope), not
			// something a template asks too much of.
			continue
		}
		if l, ok := limited[k]; ok {
			if r := requested[k]; r.Cmp(l) <= 0 {
				continue
			}
			return string(k)
		}
	}
	return ""
}

// templateAmount reports whether a quota's resource is an amount a pod or
// claim asks for as its template says (cpu, memory, ephemeral storage,
// storage, huge pages, extended resources: the compute and storage
// resource names of the ResourceQuota documentation), rather than a count
// of objects (pods, persistentvolumeclaims, count/*, a storage class's
// persistentvolumeclaims), which every revision asks one of alike.
func templateAmount(k corev1.ResourceName) bool {
	n := string(k)
	switch {
	case n == "cpu" || n == "memory" || n == "ephemeral-storage" || n == "storage":
		return true
	case strings.HasPrefix(n, "requests.") || strings.HasPrefix(n, "limits.") || strings.HasPrefix(n, "hugepages-"):
		return true
	case strings.HasSuffix(n, "/requests.storage"):
		return true // <storage-class>.storageclass.storage.k8s.io/requests.storage
	}
	return false
}

// parseResources parses a quota message's "<resource>=<quantity>,..."
// list; what does not parse is left out.
func parseResources(list string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, kv := range strings.Split(strings.TrimSuffix(list, ","), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if q, err := resource.ParseQuantity(v); ok && err == nil {
			out[corev1.ResourceName(k)] = q
		}
	}
	return out
}

func cmpOr(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// RetryCreate reports whether lull should ask the StatefulSet controller
// to try the refused create again now: a retry of the blocked schedule
// (NextRetry from since, when the session began to be refused) has come
// since the last ask (lastAsked, zero if none), or the refusing
// ResourceQuota (quota, nil when unknown or not a quota refusal) now has
// room for what was refused and the last ask is QuotaRetryFloor old. Each
// ask is a StatefulSet update, which the StatefulSet controller syncs at
// once; its own backoff grows to about 17 minutes. The floor bounds the
// asks while lull's copy of the quota shows room the API server's
// admission does not see yet.
func RetryCreate(r *Refusal, since, lastAsked time.Time, quota *corev1.ResourceQuota, now time.Time) bool {
	if r == nil {
		return false
	}
	if quota != nil && now.Sub(lastAsked) >= QuotaRetryFloor && hasRoom(quota, r.Requested) {
		return true
	}
	due := lastRetry(since, now)
	return !due.IsZero() && lastAsked.Before(due)
}

// QuotaRetryFloor is the least time between two asks that a quota with
// room makes (RetryCreate).
const QuotaRetryFloor = 5 * time.Second

// hasRoom reports whether quota, as its status now counts, has room for
// requested (nothing requested: no).
func hasRoom(quota *corev1.ResourceQuota, requested corev1.ResourceList) bool {
	if len(requested) == 0 {
		return false
	}
	for name, want := range requested {
		hard, ok := quota.Status.Hard[name]
		if !ok {
			hard, ok = quota.Spec.Hard[name]
		}
		if !ok {
			continue // no longer limited
		}
		free := hard.DeepCopy()
		free.Sub(quota.Status.Used[name])
		if free.Cmp(want) < 0 {
			return false
		}
	}
	return true
}

// lastRetry is the latest retry time of a session blocked since since
// (since + 5 s, + 15 s, + 35 s, …, as NextRetry counts them) at or before
// now; zero before the first.
func lastRetry(since, now time.Time) time.Time {
	var last time.Time
	for d, t := retryFirst, since.Add(retryFirst); !t.After(now); t = t.Add(d) {
		last = t
		d = min(2*d, retryLimit)
	}
	return last
}

// RefusedSince is when the session began to be refused for reason, as its
// UpToDate condition says (the blocked backoff counts from there); now
// when it does not say so yet.
func RefusedSince(s *lullv1.Session, reason string, now time.Time) time.Time {
	if c := meta.FindStatusCondition(s.Status.Conditions, lullv1.ConditionUpToDate); c != nil && c.Reason == reason {
		return c.LastTransitionTime.Time
	}
	return now
}
