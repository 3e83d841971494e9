{{/* Maintenance windows (driver.upgradePolicy.maintenanceWindows, recoveryPolicy.maintenanceWindows). */}}

{{/*
One maintenance window as the binaries read it (internal/window):
"<days> <start>-<end> <time zone> [finish|wait]".
*/}}
{{- define "npu-stack.windowSpec" -}}
{{- join "," .days }} {{ .start }}-{{ .end }} {{ .timeZone }}{{ with .inFlight }} {{ . }}{{ end }}
{{- end }}

{{/*
Refusals of maintenance window values the schema cannot express: a
start equal to its end, and a time zone the binaries' zone database
(files/time-zones.txt, the IANA names Go embeds with time/tzdata) does
not know. Each names the field.
*/}}
{{- define "npu-stack.checkWindows" -}}
{{- $zones := splitList "\n" (.Files.Get "files/time-zones.txt") }}
{{- range $field, $windows := dict "driver.upgradePolicy.maintenanceWindows" .Values.driver.upgradePolicy.maintenanceWindows "recoveryPolicy.maintenanceWindows" .Values.recoveryPolicy.maintenanceWindows }}
{{- range $i, $w := $windows }}
{{- $at := printf "%s[%d]" $field $i }}
{{- if eq (include "npu-stack.clockSeconds" $w.start) (include "npu-stack.clockSeconds" $w.end) }}
{{- fail (printf "%s: start and end are both %s: a window needs a length. A whole day is start \"00:00\", end \"24:00\"; a window crossing midnight ends at or before its start, on the next day (22:00 to 04:00)" $at $w.start) }}
{{- end }}
{{- if not (has $w.timeZone $zones) }}
{{- fail (printf "%s.timeZone: %q is not an IANA time zone name: use one such as Europe/Berlin, Asia/Shanghai or UTC (the tz database's names, listed in the chart's files/time-zones.txt)" $at $w.timeZone) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* A time of day HH:MM[:SS] as seconds, for comparing 22:00 with 22:00:00. */}}
{{- define "npu-stack.clockSeconds" -}}
{{- $p := splitList ":" . }}
{{- $s := add (mul (atoi (index $p 0)) 3600) (mul (atoi (index $p 1)) 60) }}
{{- if eq (len $p) 3 }}{{ $s = add $s (atoi (index $p 2)) }}{{ end }}
{{- $s }}
{{- end }}
