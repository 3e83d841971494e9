package contract

// HistoryPurpose is what an entry of the loop guard's history
// (Keys.RebootHistory) is for, besides the reboot reasons.
type HistoryPurpose string

// PurposeWedge is a wedge that ended without a reboot: the health-watch
// withdrew its recovery request after the chips passed again. It is
// recorded as failed, so it counts towards the loop guard like a reboot
// that fixed nothing: a chip that keeps failing and passing would
// otherwise cordon and evict its node over and over, unseen by the guard.
const PurposeWedge HistoryPurpose = "wedge"
