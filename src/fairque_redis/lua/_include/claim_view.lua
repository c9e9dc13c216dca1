--[[ claim_view: how a claim reads the head of the active set it serves. The reference: every
  pick reads the set's head again (one ZRANGE), so the set itself is the only state and each
  pick sees every write made before it. fast/claim_view.lua (the accelerator `claim_view`, ADR
  43) defines the same three functions and must pick the same; the script loader builds the
  claim with that one unless the accelerator is off (FAIRQUE_ACCEL_OFF=claim_view).
]]
--- @include "tenant"

-- the lowest member of active set `key`: member, score and tenant; false when the set is
-- empty. (`want`, the picks still to come, is the fast view's window; unused here)
local function fq_av_head(q, key, want)
  local first = FQ_CALL('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[1] == nil then return false end
  return first[1], first[2], fq_member_tenant(first[1])
end

-- write back what the view holds: the reference holds nothing (q.av stays nil, so the hooks
-- of fq_place, fq_deactivate and fq_migrate_member never run)
local function fq_av_drop(q) end

-- the serves reserved without a pick after u's (`k` places left): none, every serve picks
local function fq_reserve_more(q, u, k) end
