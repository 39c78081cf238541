#!/usr/bin/env python3
"""Fresh view builds side by side: two running servers (--before, --after ports, admin
adm:pass) each get the same 100k small documents; after 20 s for their compactions, six
rounds alternate which goes first, each building a new `[year, month]`/`_sum` view (a
different comment, so a different signature) and timing the first query, whose answer is
checked. Prints each server's build times and median docs/s. Standard library only.
"""
import http.client, base64, json, random, time, sys
auth="Basic "+base64.b64encode(b"adm:pass").decode()
import argparse
ap = argparse.ArgumentParser()
ap.add_argument("--before", type=int, default=5996)
ap.add_argument("--after", type=int, default=5997)
a = ap.parse_args()
ports={"before":a.before,"after":a.after}
conns={k:http.client.HTTPConnection("127.0.0.1",p,timeout=600) for k,p in ports.items()}
def req(k,m,p,b=None):
    c=conns[k]; c.request(m,p,json.dumps(b) if b is not None else None,{"Authorization":auth,"Content-Type":"application/json"}); r=c.getresponse(); return r.status, r.read()
for k in ports:
    req(k,"PUT","/vb")
    rnd=random.Random(1)
    for b in range(100):
        docs=[{"_id":"%08d"%(b*1000+i),"year":2000+rnd.randrange(16),"month":1+rnd.randrange(12),"score":rnd.randrange(100)} for i in range(1000)]
        req(k,"POST","/vb/_bulk_docs",{"docs":docs})
time.sleep(20)
res={k:[] for k in ports}
for i in range(6):
    order=list(ports) if i%2==0 else list(ports)[::-1]
    for k in order:
        req(k,"PUT","/vb/_design/v%d"%i,{"views":{"s":{"map":"function(doc){ emit([doc.year, doc.month], doc.score); /* %d */ }"%i,"reduce":"_sum"}}})
        t=time.time(); s,body=req(k,"GET","/vb/_design/v%d/_view/s"%i); dt=time.time()-t
        assert s==200 and json.loads(body)["rows"][0]["value"]>0, body
        res[k].append(dt)
        time.sleep(2)
import statistics as st
for k,v in res.items(): print(k, "builds s:", " ".join("%.3f"%x for x in v), "median %.3f"%st.median(v), "docs/s %.0f"%(100000/st.median(v)))
