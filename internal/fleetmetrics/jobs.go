package fleetmetrics

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// componentLabel names a rollout Job's kind: rollout (hook or job mode)
// or rollout-resume (the CronJob's).
const componentLabel = "app.kubernetes.io/component"

// JobStatusOf reads a Job's conditions: Complete or SuccessCriteriaMet is
// succeeded, Failed or FailureTarget failed, anything else active.
func JobStatusOf(conds []batchv1.JobCondition) JobStatus {
	for _, c := range conds {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
			return JobSucceeded
		case batchv1.JobFailed, batchv1.JobFailureTarget:
			return JobFailed
		}
	}
	return JobActive
}

func jobOf(j *batchv1.Job) Job {
	return Job{Name: j.Name, Kind: j.Labels[componentLabel], Created: j.CreationTimestamp.Time, Status: JobStatusOf(j.Status.Conditions)}
}

// slimJob keeps of a Job what jobOf reads.
func slimJob(obj any) (any, error) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return obj, nil
	}
	return &batchv1.Job{
		TypeMeta: j.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Name, Namespace: j.Namespace, UID: j.UID, ResourceVersion: j.ResourceVersion,
			CreationTimestamp: j.CreationTimestamp, Labels: map[string]string{componentLabel: j.Labels[componentLabel]},
		},
		Status: batchv1.JobStatus{Conditions: j.Status.Conditions},
	}, nil
}
