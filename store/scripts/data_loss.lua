-- data_loss.lua: records a data loss for status (Store.RecordDataLoss).
-- Every process that restored the item set writes what it restored and
-- found lost; the first to record the loss of a marker writes when and by
-- whom, and counts it: once per marker, whichever process wrote the
-- marker (an admin command may have), so no loss goes unrecorded and
-- none is counted twice.
-- KEYS[1]  the record, a hash (another type, made by hand, is replaced)
-- ARGV[1]  the ID of the marker written after the loss
-- ARGV[2]  when the loss was found, ms
-- ARGV[3]  the process that found it
-- ARGV[4]  items restored from the sources
-- ARGV[5]  items lost (in no source)
-- Result: 1 when this call counted the loss, 0 when it was counted before.
own_type(KEYS[1], 'hash')
redis.call('HSET', KEYS[1], 'restored', ARGV[4], 'lost', ARGV[5])
if redis.call('HGET', KEYS[1], 'marker') == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'marker', ARGV[1], 'at', ARGV[2], 'by', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'count', 1)
return 1
