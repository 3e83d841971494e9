package contract

// EventApprovalRemoved: the rollout removed an approve-reboot annotation
// that no pending reboot request used, so that it cannot authorise a
// later reboot of another reason.
const EventApprovalRemoved EventReason = "ApprovalRemoved"
