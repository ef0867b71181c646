package jobauth

// SignToken is signToken, for the external tests.
var SignToken = signToken

// TokenRevision is tokenRevision, for the external tests.
var TokenRevision = tokenRevision
