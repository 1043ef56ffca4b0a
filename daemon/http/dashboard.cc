// The dashboard page: one self-contained HTML file with no external resources (the daemon may run
// on a machine without internet). Its script draws SVG charts of /stats/history (hit ratios
// overall, per tier and per namespace; tier use; throughput; latency percentiles; evictions and
// demotions) and tables of /stats, and polls both.
//
// Each chart's figure carries what it plots in data-series: [{"name","key","points":[[unix_ms,
// value|null],...]}], where key is the path of the value in a /stats/history sample
// ("tiers.host.hit_ratio"), so a test (tests/integration/test_dashboard.py) can hold the drawing
// against the JSON; window.kvtierCharts has the same. Values are plotted as the JSON has them
// (ratios in [0, 1]); only the axis labels and the legend format them. Errors (a failed fetch, a
// script error) are shown on the page and listed in body's data-errors, never only in the console.
//
// Client-supplied text (namespace labels) only reaches the page escaped.
#include "daemon/http/http_server.h"

namespace kvtier::http {

const std::string& DashboardHtml() {
  static const std::string kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvtier</title>
<link rel="icon" href="data:,">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em 2em;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 .3em}h2{font-size:16px;margin:1.6em 0 .5em}
.muted{color:#777}.error{color:#b00}
#charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:20px 32px;
margin-top:1em}
figure.chart{margin:0}figcaption{font-weight:600;margin-bottom:4px}
figure.chart svg{width:100%;height:auto;display:block}
svg text{font-size:11px;fill:#666}svg .grid{stroke:#e6e6e6}svg .axis{stroke:#aaa}
svg .empty{font-size:13px;fill:#999}
.legend{font-size:12px;line-height:1.7}.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:14px;height:3px;margin-right:5px;vertical-align:middle}
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}
.bar{display:inline-block;height:10px;background:#4a7;vertical-align:middle}
</style></head><body data-errors="">
<h1>kvtier <span id="version" class="muted"></span></h1>
<div id="summary" class="muted">loading /stats ...</div>
<div id="history-status" class="muted">loading /stats/history ...</div>
<div id="charts"></div>
<h2>Tiers</h2>
<table id="tiers"><tr><th>tier</th><th>used</th><th>capacity</th><th></th><th>blocks</th>
<th>evictions</th><th>demotions</th><th>promotions</th></tr></table>
<h2>Namespaces</h2>
<table id="namespaces"><tr><th>namespace</th><th>lookups</th><th>blocks asked</th>
<th>hit ratio</th><th>hits gpu/host/nvme/remote</th><th>hit tokens</th><th>puts</th>
<th>gets</th><th>evictions</th></tr></table>
<script>
'use strict';
const TIERS=['gpu','host','nvme','remote'],OPS=['lookup','get','put','commit'];
const COLORS=['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#17becf',
  '#7f7f7f','#bcbd22'];
const CHARTS=[
  {id:'chart-hit-ratio',
   title:'Hit ratio: all tiers, and the share of blocks asked each tier served',
   fmt:'ratio',max:1,empty:'no lookups yet',
   series:h=>[{name:'all tiers',key:'hit_ratio',color:'#222',bold:true}].concat(
     tiersOf(h).map(t=>({name:t,key:'tiers.'+t+'.hit_ratio'})))},
  {id:'chart-namespace-hit-ratio',title:'Hit ratio by namespace (the busiest of each sample)',
   fmt:'ratio',max:1,series:namespaceSeries,empty:'no lookups yet'},
  {id:'chart-tier-use',title:'Tier use: bytes used of capacity',fmt:'ratio',max:1,
   series:h=>tiersOf(h).map(t=>({name:t,key:'tiers.'+t+'.used_ratio'}))},
  {id:'chart-throughput',
   title:'Throughput: commands, and lookups, gets, puts and commits per second',
   fmt:'rate',series:h=>[{name:'commands',key:'commands_per_s',color:'#222',bold:true}].concat(
     opsOf(h).map(o=>({name:o,key:'requests.'+o+'.per_s'})))},
  {id:'chart-latency-p50',title:'Latency p50 of each sample\'s commands (log scale)',
   fmt:'us',log:true,
   series:h=>opsOf(h).map(o=>({name:o,key:'requests.'+o+'.p50_us'})),empty:noLatency},
  {id:'chart-latency-p99',title:'Latency p99 of each sample\'s commands (log scale)',
   fmt:'us',log:true,
   series:h=>opsOf(h).map(o=>({name:o,key:'requests.'+o+'.p99_us'})),empty:noLatency},
  {id:'chart-evictions',title:'Evictions and demotions: blocks per sample',fmt:'count',
   series:moveSeries,empty:'no evictions or demotions in this window'},
];
window.kvtierCharts={};
const errors=[];
function fail(where,e){
  errors.push(where+': '+e);document.body.dataset.errors=errors.join('\n');
  const el=document.getElementById(where==='/stats'?'summary':'history-status');
  el.textContent='cannot read '+where+': '+e;el.className='error';
}
window.addEventListener('error',ev=>fail('script',ev.message));
window.addEventListener('unhandledrejection',ev=>fail('script',ev.reason));
function esc(s){return String(s).replace(/[&<>"']/g,c=>'&#'+c.charCodeAt(0)+';')}
// The value at `key` ("tiers.host.hit_ratio") in a sample; null where there is none.
function at(s,key){let v=s;
  for(const k of key.split('.')){if(v===null||typeof v!=='object')return null;
  v=v[k]}return v===undefined?null:v}
function tiersOf(h){const last=h.samples[h.samples.length-1];
  return TIERS.filter(t=>last&&last.tiers[t])}
function opsOf(h){return OPS.filter(o=>h.samples.some(s=>s.requests[o]&&s.requests[o].count>0))}
function noLatency(h){return h.histograms?'no commands yet':'metrics.histograms is off'}
function namespaceSeries(h){
  const ids=[];
  for(const s of h.samples)for(const id in s.namespaces)if(!ids.includes(id))ids.push(id);
  const label=id=>h.namespace_labels[id]||id;
  // Two tenants of one model share a label: their ids tell them apart.
  const name=id=>ids.some(o=>o!==id&&label(o)===label(id))?label(id)+' '+id.slice(-6):label(id);
  return ids.map(id=>({name:name(id),
    key:'namespaces.'+id+'.hit_ratio'}));
}
function moveSeries(h){
  const out=[];
  // Demotions are dashed: with a tier below, every eviction is one and the two lines coincide.
  tiersOf(h).forEach((t,i)=>['evictions','demotions'].forEach((kind,k)=>{
    const key='tiers.'+t+'.'+kind;
    if(h.samples.some(s=>at(s,key)>0))out.push({name:t+' '+kind,key,color:COLORS[(2*i+k)%10],
      dash:kind==='demotions'});
  }));
  return out;
}
function short(v){const a=Math.abs(v);
  if(a>=1e9)return (v/1e9).toFixed(1)+'G';if(a>=1e6)return (v/1e6).toFixed(1)+'M';
  if(a>=1e3)return (v/1e3).toFixed(1)+'k';
  return String(Number.isInteger(v)?v:parseFloat(v.toPrecision(3)))}
function fmtValue(fmt,v){
  if(v===null)return '-';
  if(fmt==='ratio')return (v*100).toFixed(v===0||v===1?0:1)+'%';
  if(fmt==='us')return v<1000?short(v)+' \u00b5s':
    v<1e6?(v/1e3).toFixed(1)+' ms':(v/1e6).toFixed(2)+' s';
  if(fmt==='rate')return short(v)+'/s';
  return short(v);
}
// The top of a linear axis, a round number at or above v, and how many steps make round ticks.
function niceMax(v){if(!(v>0))return {hi:1,steps:4};const p=Math.pow(10,Math.floor(Math.log10(v)));
  for(const [m,steps] of [[1,4],[2,4],[2.5,5],[5,5],[10,4]])if(m*p>=v)return {hi:m*p,steps}}
function clock(t,seconds){const d=new Date(t);const p=n=>String(n).padStart(2,'0');
  return p(d.getHours())+':'+p(d.getMinutes())+(seconds?':'+p(d.getSeconds()):'')}
// Time ticks on round local times, at most six of them.
function timeTicks(t0,t1){
  const steps=[1,2,5,10,15,30,60,120,300,600,900,1800,3600,7200,10800].map(s=>s*1000);
  const step=steps.find(s=>(t1-t0)/s<=5)||steps[steps.length-1];
  const off=new Date(t0).getTimezoneOffset()*60000,out=[];
  for(let t=Math.ceil((t0-off)/step)*step+off;t<=t1;t+=step)out.push(t);
  return {ticks:out,seconds:step<60000};
}
// The y scale: linear from 0, or (latency, which spans decades) logarithmic between powers of 10.
function yScale(def,values){
  if(def.log){const pos=values.filter(v=>v>0);
    const lo=Math.pow(10,Math.floor(Math.log10(Math.min(...pos,1e9)))),
      hi=Math.max(Math.pow(10,Math.ceil(Math.log10(Math.max(...pos,1)))),lo*10);
    const ticks=[];for(let v=lo;v<=hi*1.0001;v*=10)ticks.push(v);
    const f=v=>(Math.log10(Math.max(v,lo))-Math.log10(lo))/(Math.log10(hi)-Math.log10(lo));
    return {f,ticks}}
  const {hi,steps}=def.max?{hi:def.max,steps:4}:niceMax(Math.max(...values));
  const ticks=[];for(let i=0;i<=steps;i++)ticks.push(hi*i/steps);
  return {f:v=>v/hi,ticks};
}
const W=560,H=200,L=62,R=14,T=10,B=24;
function svgOf(inner){return '<svg viewBox="0 0 '+W+' '+H+'" role="img">'+inner+'</svg>'}
function style(s,i){return {color:s.color||COLORS[i%COLORS.length],dash:s.dash?'5 3':''}}
// The SVG of one chart, and the x position of each sample (for the hover readout).
function plot(def,series,h){
  const values=series.flatMap(s=>s.points.map(p=>p[1]).filter(v=>v!==null));
  if(!series.length||!values.length){const e=typeof def.empty==='function'?def.empty(h):def.empty;
    return {svg:svgOf('<text class="empty" x="'+W/2+'" y="'+H/2+'" text-anchor="middle">'+
      esc(e||'no samples yet')+'</text>')}}
  let t0=h.samples[0].unix_ms,t1=h.samples[h.samples.length-1].unix_ms;
  if(t1<=t0){t0-=h.interval_ms;t1+=h.interval_ms}
  const scale=yScale(def,values);
  const x=t=>L+(t-t0)/(t1-t0)*(W-L-R),y=v=>T+(1-scale.f(v))*(H-T-B);
  let out='';
  for(const v of scale.ticks){const yy=y(v).toFixed(1);
    out+='<line class="grid" x1="'+L+'" x2="'+(W-R)+'" y1="'+yy+'" y2="'+yy+'"/>'+
      '<text x="'+(L-6)+'" y="'+yy+'" dy="4" text-anchor="end">'+esc(fmtValue(def.fmt,v))+'</text>'}
  const tt=timeTicks(t0,t1);
  for(const t of tt.ticks){const xx=x(t);
    out+='<text x="'+xx.toFixed(1)+'" y="'+(H-6)+'" text-anchor="'+
      (xx<L+20?'start':xx>W-R-20?'end':'middle')+'">'+clock(t,tt.seconds)+'</text>'}
  out+='<line class="axis" x1="'+L+'" x2="'+L+'" y1="'+T+'" y2="'+(H-B)+'"/>'+
    '<line class="axis" x1="'+L+'" x2="'+(W-R)+'" y1="'+(H-B)+'" y2="'+(H-B)+'"/>';
  series.forEach((s,i)=>{
    const st=style(s,i);let d='';
    s.points.forEach((p,j)=>{if(p[1]===null)return;
      const prev=j>0&&s.points[j-1][1]!==null,next=j+1<s.points.length&&s.points[j+1][1]!==null;
      const px=x(p[0]).toFixed(1),py=y(p[1]).toFixed(1);
      if(!prev&&!next)out+='<circle cx="'+px+'" cy="'+py+'" r="2.5" fill="'+st.color+'"/>';
      d+=(prev?'L':'M')+px+' '+py});
    if(d)out+='<path d="'+d+'" fill="none" stroke="'+st.color+'" stroke-width="'+(s.bold?2.6:1.8)+
      '" stroke-dasharray="'+st.dash+'" stroke-linejoin="round"/>';
  });
  out+='<line class="cursor" x1="0" x2="0" y1="'+T+'" y2="'+(H-B)+
    '" stroke="#888" visibility="hidden"/>';
  return {svg:svgOf(out),xs:h.samples.map(s=>x(s.unix_ms))};
}
// The legend: each series' value at sample i (the latest that has one when i is undefined).
function legend(def,series,i,h){
  const head=i===undefined?'':'<span class="muted">'+clock(h.samples[i].unix_ms,true)+'</span>';
  return head+series.map((s,k)=>{const st=style(s,k);
    const p=i===undefined?s.points.filter(p=>p[1]!==null).pop():s.points[i];
    return '<span><i style="background:'+(st.dash?'repeating-linear-gradient(90deg,'+st.color+
      ' 0 5px,transparent 5px 8px)':st.color)+'"></i>'+esc(s.name)+' '+
      esc(p&&p[1]!==null?fmtValue(def.fmt,p[1]):'-')+'</span>'}).join('');
}
// Moving over a chart shows every series' value at the nearest sample in its legend.
function hover(fig,def,series,h,xs){
  const svg=fig.querySelector('svg'),cursor=svg.querySelector('.cursor');
  const lg=fig.querySelector('.legend');
  if(!cursor)return;
  svg.onmousemove=ev=>{const r=svg.getBoundingClientRect(),px=(ev.clientX-r.left)/r.width*W;
    let i=0;xs.forEach((xx,k)=>{if(Math.abs(xx-px)<Math.abs(xs[i]-px))i=k});
    cursor.setAttribute('x1',xs[i]);cursor.setAttribute('x2',xs[i]);
    cursor.setAttribute('visibility','visible');lg.innerHTML=legend(def,series,i,h)};
  svg.onmouseleave=()=>{cursor.setAttribute('visibility','hidden');lg.innerHTML=legend(def,series)};
}
function renderHistory(h){
  const charts=document.getElementById('charts');
  for(const def of CHARTS){
    let fig=document.getElementById(def.id);
    if(!fig){fig=document.createElement('figure');fig.className='chart';fig.id=def.id;
      fig.innerHTML='<figcaption>'+esc(def.title)+'</figcaption><div class="plot"></div>'+
        '<div class="legend"></div>';charts.appendChild(fig)}
    const series=(h.enabled?def.series(h):[]).map(s=>({name:s.name,key:s.key,color:s.color,
      dash:s.dash,bold:s.bold,points:h.samples.map(x=>[x.unix_ms,at(x,s.key)])}));
    fig.dataset.series=JSON.stringify(series);fig.dataset.format=def.fmt;
    window.kvtierCharts[def.id]=series;
    const drawn=h.enabled?plot(def,series,h):{svg:svgOf('<text class="empty" x="'+W/2+'" y="'+H/2+
      '" text-anchor="middle">metrics.history is off</text>')};
    fig.querySelector('.plot').innerHTML=drawn.svg;
    fig.querySelector('.legend').innerHTML=legend(def,series);
    if(drawn.xs)hover(fig,def,series,h,drawn.xs);
  }
  const status=document.getElementById('history-status');status.className='muted';
  status.textContent=!h.enabled?'No history: metrics.history is off.':
    h.samples.length+' samples of '+h.capacity+', one every '+h.interval_ms/1000+' s'+
    (h.samples.length?' (each chart point is one sample\'s interval)':'; the first is on its way');
  document.body.dataset.historySamples=h.samples.length;
  document.body.dataset.historyRenders=Number(document.body.dataset.historyRenders||0)+1;
}
let historyEvery=10000;
async function refreshHistory(){
  try{const h=await (await fetch('/stats/history')).json();
    if(h.interval_ms)historyEvery=Math.min(Math.max(h.interval_ms,1000),10000);renderHistory(h)}
  catch(e){fail('/stats/history',e)}
  setTimeout(refreshHistory,historyEvery);
}
function fmtBytes(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(b>=1024&&i<4){b/=1024;i++}
  return (i?b.toFixed(1):b)+' '+u[i]}
function row(t,cells){const r=t.insertRow();for(const c of cells){r.insertCell().innerHTML=c}}
async function refreshStats(){
  try{
    const s=await (await fetch('/stats')).json();
    document.getElementById('version').textContent=s.process.version;
    const summary=document.getElementById('summary');summary.className='muted';
    summary.textContent=s.totals.blocks_present+' blocks, '+s.process.connected_clients+
      ' clients, up '+s.process.uptime_s+' s. '+(s.process.gpu_tier||'')+' '+
      (s.process.nvme_tier||'');
    const tiers=document.getElementById('tiers');while(tiers.rows.length>1)tiers.deleteRow(1);
    for(const t of s.tiers){const f=t.capacity_bytes?t.used_bytes/t.capacity_bytes:0;
      row(tiers,[esc(t.tier),fmtBytes(t.used_bytes),fmtBytes(t.capacity_bytes),
        '<span class="bar" style="width:'+Math.round(f*200)+'px"></span> '+(f*100).toFixed(1)+'%',
        t.blocks,t.evictions,t.demotions,t.promotions])}
    const ns=document.getElementById('namespaces');while(ns.rows.length>1)ns.deleteRow(1);
    for(const n of s.namespaces){const hb=n.hit_blocks;
      row(ns,[esc(n.label||n.ref),n.lookups,n.lookup_blocks,(n.block_hit_ratio*100).toFixed(1)+'%',
        [hb.gpu,hb.host,hb.nvme,hb.remote].join(' / '),n.hit_tokens,n.puts,n.gets,n.evictions])}
  }catch(e){fail('/stats',e)}
}
refreshStats();setInterval(refreshStats,2000);refreshHistory();
</script></body></html>
)HTML";
  return kPage;
}

}  // namespace kvtier::http
