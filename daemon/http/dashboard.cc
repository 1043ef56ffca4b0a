// The dashboard page: one self-contained HTML file with no external resources (the daemon may run
// on a machine without internet), polling /stats every two seconds.
#include "daemon/http/http_server.h"

namespace kvtier::http {

const std::string& DashboardHtml() {
  static const std::string kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvtier</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:1.5em}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}
.bar{display:inline-block;height:10px;background:#4a7;vertical-align:middle}
.muted{color:#888}
</style></head><body>
<h1>kvtier <span id="version" class="muted"></span></h1>
<div id="summary" class="muted">loading /stats ...</div>
<h2>Tiers</h2>
<table id="tiers"><tr><th>tier</th><th>used</th><th>capacity</th><th></th><th>blocks</th>
<th>evictions</th><th>demotions</th></tr></table>
<h2>Namespaces</h2>
<table id="namespaces"><tr><th>namespace</th><th>lookups</th><th>blocks asked</th>
<th>hit ratio</th><th>hits gpu/host/nvme</th><th>hit tokens</th><th>evictions</th></tr></table>
<script>
function fmt(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(b>=1024&&i<4){b/=1024;i++}
return (i?b.toFixed(1):b)+' '+u[i]}
function row(t,cells){const r=t.insertRow();for(const c of cells){const d=r.insertCell();d.innerHTML=c}}
async function tick(){
  try{
    const s=await (await fetch('/stats')).json();
    document.getElementById('version').textContent=s.process.version;
    document.getElementById('summary').textContent=
      s.totals.blocks_present+' blocks, '+s.process.connected_clients+' clients, up '+
      s.process.uptime_s+' s. '+(s.process.gpu_tier||'')+' '+(s.process.nvme_tier||'');
    const tiers=document.getElementById('tiers');while(tiers.rows.length>1)tiers.deleteRow(1);
    for(const t of s.tiers){const f=t.capacity_bytes?t.used_bytes/t.capacity_bytes:0;
      row(tiers,[t.tier,fmt(t.used_bytes),fmt(t.capacity_bytes),
        '<span class="bar" style="width:'+Math.round(f*200)+'px"></span> '+(f*100).toFixed(1)+'%',
        t.blocks,t.evictions,t.demotions])}
    const ns=document.getElementById('namespaces');while(ns.rows.length>1)ns.deleteRow(1);
    for(const n of s.namespaces){row(ns,[n.label||n.id,n.lookups,n.lookup_blocks,
      (n.block_hit_ratio*100).toFixed(1)+'%',
      n.hit_blocks.gpu+' / '+n.hit_blocks.host+' / '+n.hit_blocks.nvme,n.hit_tokens,n.evictions])}
  }catch(e){document.getElementById('summary').textContent='cannot read /stats: '+e}
}
tick();setInterval(tick,2000);
</script></body></html>
)HTML";
  return kPage;
}

}  // namespace kvtier::http
