#!/bin/sh
# fenced-writer: a berth job that writes to an etcd of its own (STORE, not
# berth's) only through a fence (docs/fencing.md). Every write is one
# transaction that succeeds only while the fence key holds no token above
# this run's, and raises the fence to it; and a run whose claim deadline
# (BERTH_CLAIM_FILE) is less than MARGIN seconds away does not even try.
set -eu
: "${STORE:?the etcd endpoint to write to}" "${MARGIN:=1}"
export ETCDCTL_API=3
fence="fence/$BERTH_JOB_ID"
# etcd compares values as bytes: zero-padded, the order of the numbers.
token=$(printf '%020d' "$BERTH_FENCING_TOKEN")
above=$(printf '%020d' $((BERTH_FENCING_TOKEN + 1)))

# A compare on a value fails while its key is missing: make the fence once.
etcdctl --endpoints="$STORE" txn >/dev/null <<EOF
create("$fence") = "0"

put $fence 00000000000000000000


EOF

# in_time: now (CLOCK_BOOTTIME, /proc/uptime) is MARGIN seconds or more
# before the deadline until which no other run of this job can start.
in_time() {
	deadline=$(sed -n 's/^deadline=//p' "$BERTH_CLAIM_FILE")
	awk -v d="$deadline" -v m="$MARGIN" '{ exit !($1 < d - m) }' /proc/uptime
}

n=0
while :; do
	n=$((n + 1))
	if [ "${CHECK_DEADLINE:-yes}" = yes ] && ! in_time; then
		echo "write $n skipped (token $BERTH_FENCING_TOKEN): the claim deadline is less than ${MARGIN}s away"
	elif etcdctl --endpoints="$STORE" txn <<EOF | head -n 1 | grep -q SUCCESS; then
value("$fence") < "$above"

put $fence $token
put data/$BERTH_JOB_ID "token $BERTH_FENCING_TOKEN write $n"

get $fence

EOF
		echo "write $n accepted (token $BERTH_FENCING_TOKEN)"
	else
		echo "write $n rejected (token $BERTH_FENCING_TOKEN): the fence holds a newer token (or the store did not answer)"
	fi
	sleep 0.2
done
